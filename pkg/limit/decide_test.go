package limit

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ms = time.Millisecond

func TestDecideAllIsAllOrNothing(t *testing.T) {
	user := Limit{Size: 10, DripRate: time.Second, DripSize: 1}
	trade := Limit{Size: 1, DripRate: time.Second, DripSize: 1}
	full := State{Counter: 1, Timestamp: t0.UnixMicro()}
	states := []State{{}, full}
	buckets := []Bucket{{Key: "user", Limit: user, Hits: 1}, {Key: "trade", Limit: trade, Hits: 1}}
	results := make([]Result, 2)

	if DecideAll(states, buckets, t0, results) {
		t.Fatal("admitted although the trade bucket is full")
	}
	if !results[0].Admitted || results[0].State.Counter != 0 || results[0].Remaining != 10 {
		t.Errorf("user bucket: got %+v, want admitted alone but uncharged", results[0])
	}
	if results[1].Admitted || results[1].Reset != time.Second {
		t.Errorf("trade bucket: got %+v, want rejected with a 1s reset", results[1])
	}

	// Once trade has leaked, both are charged.
	if !DecideAll(states, buckets, t0.Add(time.Second), results) {
		t.Fatalf("rejected after the drip: %+v", results)
	}
	if results[0].State.Counter != 1 || results[1].State.Counter != 1 {
		t.Errorf("got counters %d and %d, want both charged", results[0].State.Counter, results[1].State.Counter)
	}
}

func TestDecideAllShadowBucketNeverRejects(t *testing.T) {
	l := Limit{Size: 1, DripRate: time.Second, DripSize: 1}
	full := State{Counter: 1, Timestamp: t0.UnixMicro()}
	states := []State{{}, full}
	buckets := []Bucket{{Key: "a", Limit: l, Hits: 1}, {Key: "b", Limit: l, Hits: 1, Shadow: true}}
	results := make([]Result, 2)
	if !DecideAll(states, buckets, t0, results) {
		t.Fatal("a full shadow bucket rejected the request")
	}
	if results[0].State.Counter != 1 {
		t.Errorf("bucket a: got counter %d, want 1", results[0].State.Counter)
	}
	if results[1].Admitted || results[1].State.Counter != 1 {
		t.Errorf("shadow bucket: got %+v, want reported as over and left uncharged", results[1])
	}
}

func TestDecideAllRejectedRequestKeepsRefundsToo(t *testing.T) {
	l := Limit{Size: 2, DripRate: time.Second, DripSize: 1}
	states := []State{{Counter: 2, Timestamp: t0.UnixMicro()}, {Counter: 2, Timestamp: t0.UnixMicro()}}
	buckets := []Bucket{{Key: "a", Limit: l, Hits: -1}, {Key: "b", Limit: l, Hits: 1}}
	results := make([]Result, 2)
	if DecideAll(states, buckets, t0, results) {
		t.Fatal("admitted although bucket b is full")
	}
	if results[0].State.Counter != 2 {
		t.Errorf("refunded bucket: got counter %d, want 2 (a rejected request changes nothing)", results[0].State.Counter)
	}
}

// TestDecideAllChargesAlways: a bucket that charges always is charged
// whether the request is admitted or not, past its limit; the others only
// when it is.
func TestDecideAllChargesAlways(t *testing.T) {
	budget := Limit{Algorithm: FixedWindow, Size: 10, Window: time.Hour}
	req := Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	buckets := []Bucket{{Key: "tok", Limit: budget, Hits: 8, Always: true}, {Key: "req", Limit: req, Hits: 1}}
	states := []State{{}, {Counter: 1, Timestamp: t0.UnixMicro()}} // req is full
	results := make([]Result, 2)
	if DecideAll(states, buckets, t0, results) {
		t.Fatal("admitted although req is full")
	}
	if !Saves(buckets[0], false) || Saves(buckets[1], false) {
		t.Fatal("Saves: want the budget saved and req not, in a rejected request")
	}
	if results[0].State.Counter != 8 || !results[0].Admitted || results[0].Remaining != 2 {
		t.Errorf("budget: %+v, want charged 8 with 2 remaining", results[0])
	}
	// The next 8 do not fit: charged all the same, and the budget rejects.
	states[0], states[1] = results[0].State, State{}
	if DecideAll(states, buckets, t0, results) {
		t.Fatal("admitted although the budget had no room for 8")
	}
	if results[0].State.Counter != 16 || results[0].Admitted || results[0].Remaining != 0 || results[0].Reset <= 0 {
		t.Errorf("budget: %+v, want 16 recorded, rejected, with a reset", results[0])
	}
	if results[1].State.Counter != 0 {
		t.Errorf("req: %+v, want uncharged", results[1])
	}
	// A check of the budget now rejects.
	states[0] = results[0].State
	check := []Bucket{{Key: "tok", Limit: budget, Always: true}}
	if DecideAll(states[:1], check, t0, results[:1]) || results[0].State.Counter != 16 {
		t.Errorf("a check past the budget: %+v, want rejected, the count unchanged", results[0])
	}
}
