package region

import (
	"encoding/binary"
	"math"
	"reflect"
	"slices"
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
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReport("r", "x", b)
		if err != nil {
			return
		}
		again, err := ParseReport("r", "x", AppendReport(nil, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%+v read back as %+v, %v", r, again, err)
		}
		sameAsParsed(t, b, r)
	})
}

// sameAsParsed fails t unless parseReport reads b as r, into a new list
// and into one of another's room: the same records, one a key, in the
// order of their keys.
func sameAsParsed(t *testing.T, b []byte, r Report) {
	t.Helper()
	for _, from := range [][]keyed{nil, make([]keyed, 3, 50)} {
		got, err := parseReport(r.Region, r.Replica, string(b), from)
		if err != nil || got.Epoch != r.Epoch || got.len() != len(r.Buckets) {
			t.Fatalf("parseReport: %d records of epoch %d, %v; want %d of %d", got.len(), got.Epoch, err, len(r.Buckets), r.Epoch)
		}
		for i, k := range got.list {
			if i > 0 && got.list[i-1].key >= k.key {
				t.Fatalf("parseReport: key %d after %d", k.key, got.list[i-1].key)
			}
			if want, ok := r.Buckets[k.key]; !ok || !reflect.DeepEqual(want, k.Record) {
				t.Fatalf("parseReport: key %d reads %+v, want %+v", k.key, k.Record, want)
			}
		}
	}
}

// TestParseReportList: reports in the order of their keys, in none, and
// with a key twice, read into a list as into a map.
func TestParseReportList(t *testing.T) {
	rec := func(d float64) []byte {
		return AppendReport(nil, Report{Buckets: map[uint64]Record{0: {Demand: d, Usage: 1, Bucket: Bucket{Size: 2, Rate: 3}}}})[9+8:]
	}
	for _, keys := range [][]uint64{{1, 2, 3}, {3, 1, 2}, {5, 5}, {2, 9, 2, 1, 9}, {}} {
		b := AppendReport(nil, Report{Epoch: 4})
		want := Report{Region: "eu", Replica: "a", Epoch: 4, Buckets: map[uint64]Record{}}
		for i, k := range keys {
			b = binary.BigEndian.AppendUint64(b, k)
			b = append(b, rec(float64(i))...)
			want.Buckets[k] = Record{Demand: float64(i), Usage: 1, Bucket: Bucket{Size: 2, Rate: 3}} // the last of a key
		}
		r, err := ParseReport("eu", "a", b)
		if err != nil || !reflect.DeepEqual(r, want) {
			t.Fatalf("keys %v: read %+v, %v; want %+v", keys, r, err, want)
		}
		sameAsParsed(t, b, want)
	}
}

// TestReportLate: a report's late regions cross with it; a report without
// any is written as version 1, which replicas of the version before
// read; one cut short in them is not read.
func TestReportLate(t *testing.T) {
	rec := map[uint64]Record{7: {Demand: 1, Usage: 2, Bucket: Bucket{Size: 3, Rate: 4}}}
	b := AppendReport(nil, Report{Epoch: 9, Late: []uint64{KeyHash("us"), KeyHash("ap")}, Buckets: rec})
	for _, parse := range []func([]byte) (Report, error){
		func(b []byte) (Report, error) { return ParseReport("eu", "a", b) },
		func(b []byte) (Report, error) { return parseReport("eu", "a", string(b), nil) },
	} {
		r, err := parse(b)
		if err != nil || r.Epoch != 9 || !slices.Equal(r.Late, []uint64{KeyHash("us"), KeyHash("ap")}) {
			t.Fatalf("read %+v, %v", r, err)
		}
		if got, ok := r.lookup(7); !ok || got != rec[7] {
			t.Fatalf("its record: %+v", got)
		}
		v1 := AppendReport(nil, Report{Epoch: 9, Buckets: rec})
		if v1[0] != 1 || len(v1) != 9+recordBytes {
			t.Fatalf("a report without late regions: version %d, %d bytes", v1[0], len(v1))
		}
		if r, err := parse(v1); err != nil || r.Epoch != 9 || r.Late != nil || r.len() != 1 {
			t.Fatalf("version 1: %+v, %v", r, err)
		}
		if _, err := parse(b[:10+8]); err == nil {
			t.Fatal("a report cut short in its late regions was read")
		}
	}
}
