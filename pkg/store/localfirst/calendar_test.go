package localfirst

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// tokyoDay is 10 a calendar day in Tokyo; tokyoMidnight ends the 4th of
// March 2026 there (15:00 UTC).
var (
	tokyoDay      = limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Calendar: window.Day, Zone: "Asia/Tokyo"}
	tokyoMidnight = time.Date(2026, 3, 5, 0, 0, 0, 0, window.Zone("Asia/Tokyo"))
)

// TestCalendarLeaseEndsWithItsPeriod: units a replica leased on the 4th
// are not used on the 5th, whose count another replica has spent: the
// replica asks Redis, which has no room left.
func TestCalendarLeaseEndsWithItsPeriod(t *testing.T) {
	r := newRemote()
	a, b := newStore(t, r, time.Hour), newStore(t, r, time.Hour)
	ctx := context.Background()
	req := func(hits int64) limit.Bucket { return limit.Bucket{Key: "k", Limit: tokyoDay, Hits: hits} }
	before := tokyoMidnight.Add(-10 * time.Second)
	warm(t, a, before, req(10))
	a.sync(ctx, before, false)
	if _, ok := apply(t, a, before, req(2)); !ok {
		t.Fatal("2 of 10 refused on the 4th")
	}
	if lease := leaseOf(a, "k"); lease < 8 {
		t.Fatalf("a holds %d units of the 4th, want the 8 left: the test needs them", lease)
	}
	if _, ok := apply(t, b, tokyoMidnight.Add(time.Second), req(10)); !ok {
		t.Fatal("b's 10 refused on the 5th")
	}
	settle(b)
	if _, ok := apply(t, a, tokyoMidnight.Add(2*time.Second), req(8)); ok {
		t.Fatal("a admitted 8 on the 5th, which b spent: it used units of the 4th")
	}
	settle(a)
	if got := r.state("k"); got.Counter != 10 || got.Timestamp != tokyoMidnight.UnixMicro() {
		t.Fatalf("Redis holds %+v, want the 5th's 10", got)
	}
}

// TestCalendarDebtEndsWithItsPeriod: a budget's debt made on the 4th,
// which Redis could not take then, is sent by a sync on the 4th, and
// dropped by one on the 5th: the 4th's count is gone.
func TestCalendarDebtEndsWithItsPeriod(t *testing.T) {
	for _, c := range []struct {
		sync time.Duration // from midnight
		want int64         // Redis's count then, less a's unused units
	}{
		{-time.Second, 13},
		{time.Second, 0},
	} {
		r := newRemote()
		a := newStore(t, r, time.Hour)
		ctx := context.Background()
		charge := func(hits int64) limit.Bucket {
			return limit.Bucket{Key: "tok", Limit: tokyoDay, Hits: hits, Always: true}
		}
		at := tokyoMidnight.Add(-time.Minute)
		warm(t, a, at, charge(10))
		apply(t, a, at, charge(10))
		r.down.Store(true)
		if err := a.Apply(ctx, at, []limit.Bucket{charge(3)}, make([]limit.Result, 1)); err != nil {
			t.Fatal(err)
		}
		settle(a)
		r.down.Store(false)
		now := tokyoMidnight.Add(c.sync)
		a.sync(ctx, now, false)
		settle(a)
		// (The sync also leases units for the demand it saw.)
		if got := limit.Count(r.state("tok"), tokyoDay, now) - leaseOf(a, "tok"); got != c.want {
			t.Errorf("synced at midnight%+v: Redis counts %d beside a's unused units, want %d", c.sync, got, c.want)
		}
	}
}

// TestCalendarTables: one local-first replica answers the conformance
// suite's calendar tables as exact mode does.
func TestCalendarTables(t *testing.T) {
	storetest.RunCalendar(t, func(t *testing.T) storetest.Store {
		r := newRemote()
		r.callerClock = true // the tables step the clock back, as the suite's exact stores follow
		s, err := New(r, Options{Interval: 100 * time.Millisecond, ManualSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return settled{s}
	})
}

// settled is a store whose calls' background work is done when Apply
// returns.
type settled struct{ *Store }

func (s settled) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	err := s.Store.Apply(ctx, now, buckets, results)
	s.Sync(ctx, now)
	settle(s.Store)
	return err
}
