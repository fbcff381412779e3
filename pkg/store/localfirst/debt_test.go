package localfirst

import (
	"context"
	"hash/maphash"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// budget is 1000 tokens a minute, charged always.
var budget = limit.Limit{Algorithm: limit.FixedWindow, Size: 1000, Window: time.Minute}

func charge(hits int64) limit.Bucket {
	return limit.Bucket{Key: "tok", Limit: budget, Hits: hits, Always: true}
}

// TestChargesPastTheLeaseAreRecorded: a charge that exceeds what Redis
// granted a replica, and what Redis has room for, is charged on Redis all
// the same, past the limit; a check then sees it, from any replica.
func TestChargesPastTheLeaseAreRecorded(t *testing.T) {
	r := newRemote()
	a, b := newStore(t, r, time.Hour), newStore(t, r, time.Hour)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	warm(t, a, now, charge(600)) // the whole room
	if _, ok := apply(t, a, now, charge(600)); !ok {
		t.Fatal("the first 600 did not fit a budget of 1000")
	}
	res, ok := apply(t, b, now, charge(600))
	if ok || res[0].Remaining != 0 || res[0].Reset <= 0 {
		t.Fatalf("600 more: %+v, want over the budget, with a reset", res[0])
	}
	// On Redis: a's grant (the whole room) and b's 600 past it.
	if got := r.state("tok").Counter; got != 1600 {
		t.Fatalf("Redis counts %d, want 1600: a's grant of 1000 and b's debt of 600", got)
	}
	calls := r.applies.Load() + r.leases.Load()
	for _, s := range []*Store{a, b} {
		if res, ok := apply(t, s, now, charge(0)); ok || res[0].Reset <= 0 {
			t.Fatalf("a check past the budget: %+v, want OVER_LIMIT with a reset", res[0])
		}
	}
	if n := r.applies.Load() + r.leases.Load() - calls; n != 2 {
		t.Fatalf("%d Redis calls for two checks of a limit that charges always, want one each: the others' charges decide them", n)
	}
}

// TestDebtsOutliveAFailure: a debt Redis could not take is kept and sent
// at the next sync; it is not dropped with its idle entry meanwhile.
func TestDebtsOutliveAFailure(t *testing.T) {
	r := newRemote()
	a := newStore(t, r, time.Hour)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	warm(t, a, now, charge(1000))
	apply(t, a, now, charge(1000)) // the whole budget, leased and used
	r.down.Store(true)
	res := make([]limit.Result, 1)
	if err := a.Apply(context.Background(), now, []limit.Bucket{charge(300)}, res); err != nil {
		t.Fatalf("a charge past the lease while Redis is down: %v, want it recorded locally", err)
	}
	if res[0].Admitted {
		t.Fatalf("300 past the budget admitted: %+v", res[0])
	}
	settle(a) // the charge's call, in the background, has failed: its debt is kept
	r.down.Store(false)
	for range idleHold + 2 { // syncs with no demand: the entry would be dropped, were it not for its debt
		a.sync(context.Background(), now, false)
	}
	if got := r.state("tok").Counter; got != 1300 {
		t.Fatalf("Redis counts %d after the syncs, want 1300: the debt of 300 sent", got)
	}
	a.sync(context.Background(), now, false)
	if got := r.state("tok").Counter; got != 1300 {
		t.Fatalf("Redis counts %d, want 1300: a debt is sent once", got)
	}
}

// TestChargesKeptWhileRedisIsAway: a charge past the units held while
// Redis cannot be asked is answered (usage already spent: its answer
// changes nothing) and kept, and sent once Redis is back.
func TestChargesKeptWhileRedisIsAway(t *testing.T) {
	r := newRemote()
	a := newStore(t, r, time.Hour)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	warm(t, a, now, charge(100))
	apply(t, a, now, charge(100)) // a grant of 200, 100 used
	r.down.Store(true)
	if _, ok := apply(t, a, now, charge(250)); !ok {
		t.Fatal("350 of a budget of 1000 refused")
	}
	settle(a) // the call that sent the debt, which failed
	r.down.Store(false)
	a.sync(context.Background(), now, false)
	// 100 of the 200 granted used, and the 250 kept. (The sync also leases
	// units for the demand it saw: Redis counts them, unused.)
	if got := r.state("tok").Counter - leaseOf(a, "tok"); got != 350 {
		t.Fatalf("Redis counts %d beside a's unused units, want 350: the 100 used and the 250 kept", got)
	}
}

// leaseOf returns the units s holds of the bucket key.
func leaseOf(s *Store, key string) int64 {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		e := sh.m[maphash.String(s.seed, key)]
		sh.mu.Unlock()
		if e != nil && e.key == key {
			return e.lease
		}
	}
	return 0
}

// TestHugeChargesSaturate: charges of any size, kept while Redis is away,
// neither wrap nor overflow: the debt saturates at what a count holds.
func TestHugeChargesSaturate(t *testing.T) {
	r := newRemote()
	a := newStore(t, r, time.Hour)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.down.Store(true)
	for range 2 {
		res := make([]limit.Result, 1)
		a.Apply(context.Background(), now, []limit.Bucket{charge(math.MaxInt64)}, res)
	}
	settle(a) // the second asked for units, and failed
	r.down.Store(false)
	a.sync(context.Background(), now, false)
	if got := r.state("tok").Counter; got != leaky.MaxSize {
		t.Fatalf("Redis counts %d after two charges of MaxInt64, want the saturated %d", got, int64(leaky.MaxSize))
	}
}

// TestChargeKeptWhenTheCallEndsFirst: a charge waiting for a slow Redis,
// whose call ends first, is kept and sent at the next sync.
func TestChargeKeptWhenTheCallEndsFirst(t *testing.T) {
	r := newRemote()
	r.hold = make(chan struct{})
	a := newStore(t, r, time.Hour)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	res := make([]limit.Result, 1)
	if err := a.Apply(ctx, now, []limit.Bucket{charge(300)}, res); err == nil {
		t.Fatal("a call that ended while Redis was slow succeeded")
	}
	close(r.hold)
	a.sync(context.Background(), now, false)
	if got := r.state("tok").Counter - leaseOf(a, "tok"); got != 300 {
		t.Fatalf("Redis counts %d beside a's unused units, want the 300 charged", got)
	}
}

// TestQuotaBucketsAskForUnits: a shadow bucket (the service's quota-mode
// buckets are) asks Redis for units like any other, so that it reports
// room where Redis has room.
func TestQuotaBucketsAskForUnits(t *testing.T) {
	r := newRemote()
	a := newStore(t, r, time.Hour)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	quota := limit.Bucket{Key: "q", Limit: limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: time.Minute}, Hits: 1, Shadow: true}
	for i := range 150 {
		res, _ := apply(t, a, now, quota)
		settle(a) // a request racing its own call for units may be refused
		if want := i < 100; res[0].Admitted != want {
			t.Fatalf("call %d: admitted %v, want %v: a quota must say whether Redis has room", i, res[0].Admitted, want)
		}
	}
}
