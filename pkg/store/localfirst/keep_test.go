package localfirst

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// roomy is a limit whose units a replica holds are few beside its room,
// and that drips once a minute.
var roomy = limit.Limit{Size: 1_000_000, DripRate: time.Minute, DripSize: 1}

// calls is every call the remote has had.
func calls(r *remote) int64 { return r.applies.Load() + r.leases.Load() }

// manualStore returns a remote deciding at the caller's instants, a store
// on it that syncs when told (closed when t ends), and an instant to start
// at.
func manualStore(t *testing.T, interval time.Duration) (*remote, *Store, time.Time) {
	t.Helper()
	r := newRemote()
	r.callerClock = true
	s, err := New(r, Options{Interval: interval, ManualSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return r, s, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
}

// inUse has bucket b in demand on s, three requests of it, and syncs
// once: it holds units.
func inUse(t *testing.T, s *Store, now *time.Time, interval time.Duration, b limit.Bucket) {
	t.Helper()
	for range 3 {
		apply(t, s, *now, b)
	}
	settle(s)
	syncFor(s, now, interval, interval)
	if leaseOf(s, b.Key) == 0 {
		t.Fatal("a bucket in demand holds no units after a sync")
	}
}

// syncFor syncs s every interval from *now for d, moving *now on.
func syncFor(s *Store, now *time.Time, interval, d time.Duration) {
	for end := now.Add(d); now.Before(end); {
		*now = now.Add(interval)
		s.Sync(context.Background(), *now)
	}
}

// TestShortIntervalKeepsBucketsSeenEveryFewIntervals: with a 100ms
// interval, a bucket seen every 600ms is kept and decided here once it
// holds units, not sent to Redis at each sighting, as when sightings and
// idle units lasted two and four intervals.
func TestShortIntervalKeepsBucketsSeenEveryFewIntervals(t *testing.T) {
	const interval = 100 * time.Millisecond
	r, s, now := manualStore(t, interval)
	b := limit.Bucket{Key: "api|user=alice", Limit: roomy, Hits: 1}
	for range 3 { // decided on Redis twice, then given units by a sync
		apply(t, s, now, b)
		syncFor(s, &now, interval, 600*time.Millisecond)
	}
	before := calls(r)
	for i := range 30 {
		if _, ok := apply(t, s, now, b); !ok {
			t.Fatalf("sighting %d refused", i+4)
		}
		syncFor(s, &now, interval, 600*time.Millisecond)
	}
	if n := calls(r) - before; n != 0 {
		t.Fatalf("30 sightings 600ms apart of a bucket holding units cost %d Redis calls, want 0", n)
	}
	if got, want := r.state(b.Key).Counter-leaseOf(s, b.Key), int64(33); got != want {
		t.Fatalf("Redis counts %d beside the units held, want the %d admitted", got, want)
	}
}

// TestRoomyUnitsAreKeptWhileIdle: units few beside the bucket's room stay
// with an idle bucket for keepTime, so that it is decided here when it
// comes back; then they go back and the bucket is dropped. Scarce units go
// back after idleHold intervals (TestSyncGivesBackWhatIsNotUsed).
func TestRoomyUnitsAreKeptWhileIdle(t *testing.T) {
	const interval = time.Second
	r, s, now := manualStore(t, interval)
	b := limit.Bucket{Key: "k", Limit: roomy, Hits: 1}
	inUse(t, s, &now, interval, b)
	syncFor(s, &now, interval, (idleHold+2)*interval)
	if leaseOf(s, b.Key) == 0 {
		t.Fatalf("roomy units given back after %d idle intervals, before keepTime", idleHold+2)
	}
	before := calls(r)
	apply(t, s, now, b)
	if calls(r) != before {
		t.Fatal("a bucket back within keepTime went to Redis")
	}
	syncFor(s, &now, interval, keepTime+2*interval)
	if got := r.state(b.Key).Counter; got != 4 {
		t.Fatalf("Redis counts %d after keepTime idle, want the 4 admitted", got)
	}
	if s.Len() != 0 {
		t.Fatalf("%d entries kept after keepTime idle", s.Len())
	}
}

// TestUnitsRenewedAfterMaxHoldOrADrip: a leaky bucket's units in use are
// renewed after maxHold intervals, or one drip if that is longer: a bucket
// that drips every 10ms after maxHold intervals, one that drips once a
// minute not before a minute.
func TestUnitsRenewedAfterMaxHoldOrADrip(t *testing.T) {
	const interval = 100 * time.Millisecond
	for _, c := range []struct {
		drip, hold time.Duration
	}{
		{10 * time.Millisecond, maxHold * interval},
		{time.Minute, time.Minute},
	} {
		r, s, now := manualStore(t, interval)
		b := limit.Bucket{Key: "k", Limit: limit.Limit{Size: 1_000_000, DripRate: c.drip, DripSize: 1}, Hits: 1}
		for range 3 {
			apply(t, s, now, b)
		}
		settle(s) // the third request was granted units
		granted, leases := now, r.leases.Load()
		renewed := time.Duration(0)
		for now.Sub(granted) <= c.hold+interval {
			apply(t, s, now, b) // in use every interval
			syncFor(s, &now, interval, interval)
			if r.leases.Load() != leases {
				renewed = now.Sub(granted)
				break
			}
		}
		if renewed != c.hold {
			t.Errorf("drip %v: units in use renewed %v after their grant, want %v", c.drip, renewed, c.hold)
		}
	}
}

// TestIdleBucketsWaitForTheSweep: between sweeps a sync looks only at the
// buckets in use; an idle bucket's scarce units go back at the first
// sweep after idleHold intervals, within sweepTime.
func TestIdleBucketsWaitForTheSweep(t *testing.T) {
	const interval = 100 * time.Millisecond
	r, s, now := manualStore(t, interval)
	b := limit.Bucket{Key: "k", Limit: limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}, Hits: 1}
	inUse(t, s, &now, interval, b)
	syncFor(s, &now, interval, idleHold*interval+sweepTime)
	if got := r.state(b.Key).Counter; got != 3 {
		t.Fatalf("Redis counts %d %v after the bucket's last use, want its 3 admitted: its units back", got, idleHold*interval+sweepTime)
	}
}

// TestRequestsWaitForTheLearner: requests for a bucket whose model a lease
// is learning wait for its answer and are decided on the model, as exact
// mode decides them: beside it, on Redis, they would find the room its
// units took. A bucket of 3 (one used): two requests while the lease is
// out are both admitted, the next refused.
func TestRequestsWaitForTheLearner(t *testing.T) {
	r := newRemote()
	r.callerClock = true
	s := newStore(t, r, time.Hour)
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	b := limit.Bucket{Key: "k", Limit: limit.Limit{Size: 3, DripRate: time.Hour, DripSize: 1}, Hits: 1}
	apply(t, s, now, b) // seen once: decided on Redis
	r.hold = make(chan struct{})
	answers := make(chan bool, 2)
	for range 2 {
		go func() {
			res := make([]limit.Result, 1)
			err := s.Apply(context.Background(), now, []limit.Bucket{b}, res)
			answers <- err == nil && res[0].Admitted
		}()
	}
	time.Sleep(20 * time.Millisecond) // both classified: one learning, one waiting
	close(r.hold)
	for range 2 {
		if !<-answers {
			t.Fatal("a request beside the learner refused: the bucket had room for both")
		}
	}
	r.hold = nil
	if res, ok := apply(t, s, now, b); ok || res[0].Remaining != 0 {
		t.Fatalf("the fourth hit on a bucket of 3: admitted %v, remaining %d; want refused, 0", ok, res[0].Remaining)
	}
}
