package localfirst

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// hourOf1000 allows 100 times a request of 10 hits: such a request is
// admitted on trust at its bucket's first sighting.
var hourOf1000 = limit.Limit{Algorithm: limit.FixedWindow, Size: 1000, Window: time.Hour}

// TestFirstSightingIsTrusted: a bucket not seen for two intervals, under
// a limit that allows 100 times the request, is admitted without asking
// Redis, and charged there at the next sync; seen again, it is decided on
// Redis. A small limit is never trusted.
func TestFirstSightingIsTrusted(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Minute) // within a window
	b := limit.Bucket{Key: "a", Limit: hourOf1000, Hits: 10}
	res, ok := apply(t, s, now, b)
	if !ok || res[0].Remaining != 990 {
		t.Fatalf("first sighting: admitted %v, %+v; want admitted, 990 remaining as an empty bucket", ok, res[0])
	}
	if r.applies.Load()+r.leases.Load() != 0 {
		t.Fatal("a trusted request called Redis")
	}
	apply(t, s, now, b)
	if r.applies.Load() != 1 {
		t.Fatalf("second sighting: %d decisions on Redis, want 1", r.applies.Load())
	}
	s.sync(context.Background(), now, false)
	if got := r.state("a").Counter - leaseOf(s, "a"); got != 20 {
		t.Fatalf("Redis counts %d beside the units leased, want the 20 admitted", got)
	}
	applies := r.applies.Load()
	small := limit.Bucket{Key: "s", Limit: tenPerSecond, Hits: 1}
	apply(t, s, now, small)
	if r.applies.Load() != applies+1 {
		t.Fatal("a request under a limit of 10 was admitted on trust")
	}
	quota := limit.Bucket{Key: "q", Limit: hourOf1000, Hits: 1, Shadow: true}
	apply(t, s, now, quota)
	if r.applies.Load() != applies+2 {
		t.Fatal("a quota bucket was admitted on trust: its figures must be Redis's")
	}
}

// TestTrustIsGivenOncePerFill: a bucket already full on Redis, first seen
// by this replica, is admitted on trust once; the sync's charge finds it
// full, and from then on it is refused here, even after it has been idle
// for many intervals, until Redis would have room.
func TestTrustIsGivenOncePerFill(t *testing.T) {
	r := newRemote()
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Minute)
	r.states["a"] = limit.State{Counter: 1000, Timestamp: now.Truncate(time.Hour).UnixMicro()}
	s := newStore(t, r, time.Hour)
	b := limit.Bucket{Key: "a", Limit: hourOf1000, Hits: 10}
	admitted := 0
	for step := range 20 {
		at := now.Add(time.Duration(step) * time.Minute)
		if _, ok := apply(t, s, at, b); ok {
			admitted++
		}
		for range 3 { // idle long enough to be forgotten, but for its mark
			s.sync(context.Background(), at, false)
		}
	}
	if admitted != 1 {
		t.Fatalf("admitted %d requests on a full bucket over 20 idle spells, want the 1 trusted", admitted)
	}
	if n := r.applies.Load(); n != 1 {
		t.Fatalf("%d calls to Redis, want the sync's that charged the trusted request: the bucket known full is refused here", n)
	}
	// In the next window it has room again.
	if _, ok := apply(t, s, now.Add(time.Hour), b); !ok {
		t.Fatal("refused in a new window")
	}
}

// TestRefusedRequestChargesNoTrust: a request refused by another bucket
// charges nothing of a bucket admitted on trust, but the hits of a limit
// that charges always.
func TestRefusedRequestChargesNoTrust(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Minute)
	full := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	r.states["full"] = limit.State{Counter: 1, Timestamp: now.UnixMicro()}
	usage := limit.Bucket{Key: "u", Limit: hourOf1000, Hits: 10, Always: true}
	plain := limit.Bucket{Key: "p", Limit: hourOf1000, Hits: 10}
	if _, ok := apply(t, s, now, plain, usage, limit.Bucket{Key: "full", Limit: full, Hits: 1}); ok {
		t.Fatal("admitted past a full bucket")
	}
	s.sync(context.Background(), now, false)
	if got := r.state("p").Counter; got != 0 {
		t.Fatalf("Redis counts %d for a bucket of a refused request, want 0", got)
	}
	if got := r.state("u").Counter; got != 10 {
		t.Fatalf("Redis counts %d for a limit that charges always, want the 10 charged", got)
	}
}

// TestTrustedChargesOutliveAFailure: hits admitted on trust whose sync
// fails are charged at the next one.
func TestTrustedChargesOutliveAFailure(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Minute)
	apply(t, s, now, limit.Bucket{Key: "a", Limit: hourOf1000, Hits: 10})
	r.down.Store(true)
	s.sync(context.Background(), now, false)
	r.down.Store(false)
	s.sync(context.Background(), now, false)
	s.sync(context.Background(), now, false)
	if got := r.state("a").Counter; got != 10 {
		t.Fatalf("Redis counts %d, want the 10 admitted, charged once", got)
	}
}
