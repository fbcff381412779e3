package region

import (
	"math"
	"reflect"
	"testing"
)

// TestReportRoundTrip: a report reads back as it was written.
func TestReportRoundTrip(t *testing.T) {
	r := Report{Region: "eu", Replica: "a1", Epoch: 1_800_000_000, Buckets: map[uint64]Record{
		KeyHash("api|user=alice"): {Demand: 12.5, Usage: 3, Bucket: Bucket{Size: 60, Rate: 60}},
		KeyHash("api|user=bob"):   {Demand: 0, Usage: 1e12, Bucket: Bucket{Size: 1e12, Rate: 1.0 / 86400}},
	}}
	got, err := ParseReport("eu", "a1", AppendReport(nil, r))
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("%+v, %v; want %+v", got, err, r)
	}
	empty, err := ParseReport("us", "b", AppendReport(nil, Report{Epoch: 7}))
	if err != nil || empty.Epoch != 7 || len(empty.Buckets) != 0 || empty.Region != "us" {
		t.Fatalf("an empty report: %+v, %v", empty, err)
	}
}

// TestReportRefusals: a report of another version, cut short or with a
// record cut short is an error; a quantity not a number, or negative,
// reads as none.
func TestReportRefusals(t *testing.T) {
	good := AppendReport(nil, Report{Epoch: 3, Buckets: map[uint64]Record{1: {Demand: 1}}})
	for name, b := range map[string][]byte{
		"empty":         nil,
		"cut":           good[:5],
		"version":       append([]byte{9}, good[1:]...),
		"record cut":    good[:len(good)-3],
		"record beyond": append(good, 1, 2),
	} {
		if _, err := ParseReport("r", "x", b); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	nan := AppendReport(nil, Report{Epoch: 3, Buckets: map[uint64]Record{1: {Demand: math.NaN(), Usage: -4, Bucket: Bucket{Size: math.Inf(-1), Rate: 5}}}})
	r, err := ParseReport("r", "x", nan)
	if err != nil || r.Buckets[1] != (Record{Bucket: Bucket{Rate: 5}}) {
		t.Fatalf("%+v, %v", r, err)
	}
}

// FuzzParseReport: no input makes ParseReport panic, and what it reads
// writes back to what it read.
func FuzzParseReport(f *testing.F) {
	f.Add(AppendReport(nil, Report{Epoch: 3, Buckets: map[uint64]Record{1: {Demand: 1, Usage: 2, Bucket: Bucket{Size: 3, Rate: 4}}}}))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReport("r", "x", b)
		if err != nil {
			return
		}
		again, err := ParseReport("r", "x", AppendReport(nil, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%+v read back as %+v, %v", r, again, err)
		}
	})
}
