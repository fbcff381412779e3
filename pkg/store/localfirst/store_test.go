package localfirst

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// remote is a Remote kept in process by limit.Lease and limit.DecideAll,
// for the store's own logic; test/integration runs the store on Redis.
type remote struct {
	mu      sync.Mutex
	states  map[string]limit.State
	leases  atomic.Int64 // LeaseAll calls
	applies atomic.Int64
	down    atomic.Bool
	// hold, if set, holds calls until it is closed: a slow Redis.
	hold chan struct{}
	// last is the latest time a call decided at: Redis's clock never goes
	// back, so a call held and run late decides at the time it runs.
	last time.Time
	// callerClock decides at the time given, even earlier than the last,
	// as a Redis store with the caller's clock does.
	callerClock bool
}

// clock returns the time a call made at now decides at. Called with mu held.
func (r *remote) clock(now time.Time) time.Time {
	if now.Before(r.last) && !r.callerClock {
		return r.last
	}
	r.last = now
	return now
}

func newRemote() *remote { return &remote{states: map[string]limit.State{}} }

var errDown = errors.New("down")

func (r *remote) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return ctx.Err() // not run
		}
	}
	if r.down.Load() {
		return errDown
	}
	r.applies.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	now = r.clock(now)
	states := make([]limit.State, len(buckets))
	for i, b := range buckets {
		states[i] = r.states[b.Key]
	}
	admitted := limit.DecideAll(states, buckets, now, results)
	for i, b := range buckets {
		if limit.Saves(b, admitted) {
			r.states[b.Key] = results[i].State
		}
	}
	return nil
}

func (r *remote) LeaseAll(_ context.Context, now time.Time, leases []redis.Lease) (int64, error) {
	if r.hold != nil {
		<-r.hold
	}
	if r.down.Load() {
		for i := range leases {
			leases[i].Err = errDown
		}
		return 0, errDown
	}
	r.leases.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	now = r.clock(now)
	for i := range leases {
		l := &leases[i]
		st := r.states[l.Key]
		st.Counts = slices.Clone(st.Counts)
		g, res := limit.Lease(st, l.Limit, now, l.Return, time.UnixMicro(l.At), l.Ask)
		r.states[l.Key] = res.State
		l.Granted, l.State = g, asRedisAnswers(res.State, l.Limit, now)
		peek := res.State
		peek.Counts = slices.Clone(peek.Counts) // Decide charges them if it admits
		if one := limit.Decide(peek, l.Limit, now, 1); !one.Admitted {
			l.Wait = one.Reset // when it has room for one more, as Redis says
		}
	}
	for i := range leases {
		leases[i].Now = now.UnixMicro()
	}
	return now.UnixMicro(), nil
}

// asRedisAnswers is a bucket's state as Redis's lease answer holds it: a
// window's count at now and the start of its current (sub-)window, with
// no counts.
func asRedisAnswers(st limit.State, l limit.Limit, now time.Time) limit.State {
	switch l.Algorithm {
	case limit.SlidingWindow:
		res := l.Sliding().Resolution.Microseconds()
		return limit.State{Counter: limit.Count(st, l, now), Timestamp: floorDiv(now.UnixMicro(), res) * res}
	case limit.FixedWindow:
		if l.IsCalendar() {
			return limit.State{Counter: limit.Count(st, l, now), Timestamp: l.CountedPeriod(st, now).Start}
		}
		win := l.Fixed().Window.Microseconds()
		return limit.State{Counter: limit.Count(st, l, now), Timestamp: floorDiv(now.UnixMicro(), win) * win}
	}
	return st
}

// state returns bucket key's state, as Redis holds it.
func (r *remote) state(key string) limit.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[key]
}

func (r *remote) State(_ context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range buckets {
		states[i] = r.states[b.Key]
	}
	return now, nil
}

func (r *remote) Reset(_ context.Context, keys []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		delete(r.states, k)
	}
	return nil
}

func (r *remote) WatchResets(ctx context.Context, _ func([]string)) { <-ctx.Done() }

func (r *remote) Check(context.Context) error { return nil }
func (r *remote) Close() error                { return nil }

func newStore(t *testing.T, r Remote, interval time.Duration) *Store {
	t.Helper()
	s, err := New(r, Options{Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func apply(t *testing.T, s *Store, now time.Time, bs ...limit.Bucket) ([]limit.Result, bool) {
	t.Helper()
	res := make([]limit.Result, len(bs))
	if err := s.Apply(context.Background(), now, bs, res); err != nil {
		t.Fatal(err)
	}
	ok := true
	for i, r := range res {
		if !r.Admitted && !bs[i].Shadow {
			ok = false
		}
	}
	return res, ok
}

var tenPerSecond = limit.Limit{Size: 10, DripRate: 100 * time.Millisecond, DripSize: 1}

// warm has s hold a model and lease units of bucket b, as for a bucket
// seen in the interval with b.Hits of demand, without charging b on Redis.
func warm(t *testing.T, s *Store, now time.Time, b limit.Bucket) {
	t.Helper()
	h := maphash.String(s.seed, b.Key)
	sh := &s.shards[h%shards]
	sh.mu.Lock()
	e, err := s.entry(sh, h, b)
	if err == nil {
		e.demand += b.Hits
		e.known = true
	}
	sh.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s.sync(context.Background(), now, false)
	if leaseOf(s, b.Key) == 0 {
		t.Fatalf("nothing leased of %s", b.Key)
	}
}

// settle waits until no call for units or debts is out.
func settle(s *Store) { s.asking.Wait(); s.paying.Wait() }

func TestAdmitsWhatTheLimitAllows(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	now := time.Now()
	admitted := 0
	for range 10 {
		if _, ok := apply(t, s, now, limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 1}); ok {
			admitted++
		}
	}
	// Refused on the model, as it knows the bucket full: no Redis call.
	calls := r.leases.Load() + r.applies.Load()
	for range 15 {
		if _, ok := apply(t, s, now, limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 1}); ok {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of 25 at one instant, want the bucket's 10", admitted)
	}
	if n := r.leases.Load() + r.applies.Load() - calls; n != 0 {
		t.Fatalf("%d Redis calls for requests the model refuses, want none", n)
	}
	// A second on, the bucket has leaked them all.
	if _, ok := apply(t, s, now.Add(time.Second), limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 10}); !ok {
		t.Fatal("10 refused a second later, on a bucket of 10 a second")
	}
}

func TestFewRedisCallsForManyRequests(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	big := limit.Limit{Size: 1 << 30, DripRate: time.Minute, DripSize: 1}
	now := time.Now()
	b := limit.Bucket{Key: "a", Limit: big, Hits: 1}
	warm(t, s, now, b)
	for range 10000 {
		if _, ok := apply(t, s, now, b); !ok {
			t.Fatal("rejected under a large limit")
		}
	}
	settle(s)
	// A leaky bucket holds a sixteenth of its room: no call at all.
	if n := r.leases.Load() + r.applies.Load(); n > 2 {
		t.Fatalf("%d Redis calls for 10000 requests, want the lease's", n)
	}
}

// TestColdBucketsAreDecidedOnRedis: a bucket seen once is decided on Redis,
// by one call, as in exact mode, and leases nothing; seen again, it is
// decided by one lease call that brings its model and units, and its
// requests are decided here after that.
func TestColdBucketsAreDecidedOnRedis(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	now := time.Now()
	a := limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 1}
	apply(t, s, now, a)
	if r.applies.Load() != 1 || r.leases.Load() != 0 || s.Len() != 0 {
		t.Fatalf("a bucket seen once: %d decisions and %d lease calls on Redis, %d entries; want 1, 0, 0",
			r.applies.Load(), r.leases.Load(), s.Len())
	}
	// Seen again: decided by one lease call, whose answer is its model,
	// with units for the requests to come.
	apply(t, s, now, a)
	settle(s)
	if r.applies.Load() != 1 || r.leases.Load() != 1 || s.Len() != 1 {
		t.Fatalf("seen twice: %d decisions and %d lease calls on Redis, %d entries; want 1, 1, 1", r.applies.Load(), r.leases.Load(), s.Len())
	}
	if leaseOf(s, "a") == 0 {
		t.Fatal("a bucket seen twice holds no units")
	}
	apply(t, s, now, a)
	if r.applies.Load() != 1 || r.leases.Load() != 1 {
		t.Fatal("a request for a leased bucket went to Redis")
	}
	// Seen once two syncs ago and not since: forgotten, and cold again.
	apply(t, s, now, limit.Bucket{Key: "b", Limit: tenPerSecond, Hits: 1})
	s.sync(context.Background(), now, false)
	s.sync(context.Background(), now, false)
	apply(t, s, now, limit.Bucket{Key: "b", Limit: tenPerSecond, Hits: 1})
	s.sync(context.Background(), now, false)
	if leaseOf(s, "b") != 0 {
		t.Fatal("a bucket seen once in three intervals was leased units")
	}
}

func TestAllOrNothingWithinAReplica(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	one := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	now := time.Now()
	if _, ok := apply(t, s, now, limit.Bucket{Key: "tight", Limit: one, Hits: 1}); !ok {
		t.Fatal("first request rejected")
	}
	wide := limit.Bucket{Key: "wide", Limit: tenPerSecond, Hits: 1}
	if _, ok := apply(t, s, now, wide, limit.Bucket{Key: "tight", Limit: one, Hits: 1}); ok {
		t.Fatal("admitted past a full bucket")
	}
	// The rejected request charged nothing on "wide": all 10 are left.
	for i := range 10 {
		if _, ok := apply(t, s, now, wide); !ok {
			t.Fatalf("request %d on the other bucket rejected: the rejected request charged it", i+1)
		}
	}
}

func TestSyncGivesBackWhatIsNotUsed(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	now := time.Now()
	for range 3 {
		apply(t, s, now, limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 1})
	}
	settle(s) // the third asked for units
	// Held while idle for fewer than idleHold intervals...
	s.sync(context.Background(), now, false) // the interval with demand
	for range idleHold - 1 {
		s.sync(context.Background(), now, false)
	}
	if got := r.state("a").Counter; got == 3 {
		t.Fatal("gave everything back before the bucket was idle for idleHold intervals")
	}
	// ...then everything unused is back on "Redis", and the bucket dropped.
	s.sync(context.Background(), now, false)
	s.sync(context.Background(), now, false)
	if got := r.state("a").Counter; got != 3 {
		t.Fatalf("Redis holds %d after the syncs, want the 3 admitted", got)
	}
	if s.Len() != 0 {
		t.Fatalf("%d buckets still held after %d idle intervals", s.Len(), idleHold+1)
	}
}

func TestCloseGivesEverythingBack(t *testing.T) {
	r := newRemote()
	s, err := New(r, Options{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for range 4 {
		apply(t, s, now, limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 1})
	}
	s.Close()
	if got := r.state("a").Counter; got != 4 {
		t.Fatalf("Redis holds %d after Close, want the 4 admitted", got)
	}
}

func TestRedisDownIsAnError(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	r.down.Store(true)
	res := make([]limit.Result, 1)
	err := s.Apply(context.Background(), time.Now(), []limit.Bucket{{Key: "a", Limit: tenPerSecond, Hits: 1}}, res)
	if err == nil {
		t.Fatal("no error when a lease was needed and Redis is down")
	}
}

func TestFullTableDecidesOnRedis(t *testing.T) {
	r := newRemote()
	s, err := New(r, Options{Interval: time.Hour, MaxBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	a := limit.Bucket{Key: "a", Limit: tenPerSecond, Hits: 1}
	b := limit.Bucket{Key: "b", Limit: tenPerSecond, Hits: 1}
	apply(t, s, now, a)
	apply(t, s, now, a) // an entry for a: room for b's sighting, not for b's entry
	apply(t, s, now, b)
	apply(t, s, now, b)
	s.sync(context.Background(), now, false)
	applies := r.applies.Load()
	apply(t, s, now, a)
	if r.applies.Load() != applies {
		t.Fatal("a bucket the table had room for was decided on Redis")
	}
	apply(t, s, now, b)
	if r.applies.Load() != applies+1 {
		t.Fatal("a bucket the table had no room for was not decided on Redis")
	}
	if s.Bytes() > 300 {
		t.Fatalf("the table counts %d bytes, over its 300", s.Bytes())
	}
}

func TestFixedWindowLeaseEndsWithItsWindow(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: time.Second}
	t0 := time.UnixMicro(1_800_000_000_500_000) // half way through a window
	warm(t, s, t0, limit.Bucket{Key: "w", Limit: l, Hits: 1})
	// In the next window, the units of the last are no use: Redis is asked
	// for new ones.
	leases := r.leases.Load()
	if _, ok := apply(t, s, t0.Add(time.Second), limit.Bucket{Key: "w", Limit: l, Hits: 1}); !ok {
		t.Fatal("refused in a new window")
	}
	if r.leases.Load() != leases+1 {
		t.Fatal("used a lease of a window that had ended")
	}
	if got := r.state("w"); got.Timestamp != t0.Add(time.Second).Truncate(time.Second).UnixMicro() || got.Counter < 1 {
		t.Fatalf("Redis holds %+v: the request is not counted in its window", got)
	}
}

func shardOf(s *Store, key string) uint32 {
	for i := range s.shards {
		if _, ok := s.shards[i].m[maphash.String(s.seed, key)]; ok {
			return uint32(i)
		}
	}
	return 0
}

// slowRemote holds every lease call until release is closed.
type slowRemote struct {
	*remote
	release chan struct{}
	calls   atomic.Int64
}

func (r *slowRemote) LeaseAll(ctx context.Context, now time.Time, leases []redis.Lease) (int64, error) {
	r.calls.Add(1)
	<-r.release
	return r.remote.LeaseAll(ctx, now, leases)
}

// TestConcurrentNeverAdmitsPastTheLimit runs random requests of one to
// three buckets, some shadow, some refunds, from many goroutines with
// syncs between, on limits that never leak: each bucket admits at most its
// size, and nothing fails.
func TestConcurrentNeverAdmitsPastTheLimit(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	limits := map[string]limit.Limit{
		"a": {Size: 50, DripRate: 1000 * time.Hour, DripSize: 1},
		"b": {Size: 80, DripRate: 1000 * time.Hour, DripSize: 1},
		"c": {Algorithm: limit.FixedWindow, Size: 60, Window: 1000 * time.Hour},
		"d": {Algorithm: limit.SlidingWindow, Size: 70, Window: 1000 * time.Hour, Resolution: 100 * time.Hour},
	}
	keys := []string{"a", "b", "c", "d"}
	var admitted [4]atomic.Int64
	now := time.UnixMicro(1_800_000_000_500_000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				n := 1 + rng.IntN(3)
				var bs []limit.Bucket
				var idx []int
				for _, k := range rng.Perm(4)[:n] {
					bs = append(bs, limit.Bucket{Key: keys[k], Limit: limits[keys[k]], Hits: int64(rng.IntN(3)), Shadow: rng.IntN(8) == 0})
					idx = append(idx, k)
				}
				res := make([]limit.Result, n)
				if err := s.Apply(context.Background(), now, bs, res); err != nil {
					t.Error(err)
					return
				}
				ok := true
				for i, rs := range res {
					if !rs.Admitted && !bs[i].Shadow {
						ok = false
					}
				}
				if ok {
					for i, b := range bs {
						if !b.Shadow {
							admitted[idx[i]].Add(b.Hits)
						}
					}
				}
				if rng.IntN(200) == 0 {
					s.sync(context.Background(), now, false)
				}
			}
		})
	}
	wg.Wait()
	for i, k := range keys {
		if got := admitted[i].Load(); got > limits[k].Size {
			t.Errorf("bucket %s admitted %d, over its limit %d", k, got, limits[k].Size)
		}
	}
}

// TestResetAdmitsAgain fills a bucket, resets it, and is admitted again at
// once: the replica forgot that the bucket was full and the units it held.
func TestResetAdmitsAgain(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	one := limit.Limit{Size: 2, DripRate: time.Hour, DripSize: 1}
	now := time.Now()
	b := limit.Bucket{Key: "a", Limit: one, Hits: 1}
	apply(t, s, now, b)
	apply(t, s, now, b)
	if _, ok := apply(t, s, now, b); ok {
		t.Fatal("admitted past the limit")
	}
	states := make([]limit.State, 1)
	if _, err := s.State(context.Background(), now, []limit.Bucket{b}, states); err != nil || states[0].Counter != 2 {
		t.Fatalf("state %+v, %v; want the 2 charged", states[0], err)
	}
	if err := s.Reset(context.Background(), []string{"a"}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, ok := apply(t, s, now, b); !ok {
			t.Fatalf("request %d after the reset rejected", i+1)
		}
	}
	if _, ok := apply(t, s, now, b); ok {
		t.Fatal("admitted past the limit after the reset")
	}
}

// TestStaleUnitsGoBackToTheirSubWindow lets a sliding window's units
// expire twice before a sync gives them back: the units of the first
// grant cannot go back (one set aside at a time), and must not be taken
// from the sub-window of the second, which would count fewer hits there
// than were admitted.
func TestStaleUnitsGoBackToTheirSubWindow(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	l := limit.Limit{Algorithm: limit.SlidingWindow, Size: 100, Window: 10 * time.Hour, Resolution: time.Hour}
	t0 := time.UnixMicro(1_800_000_000_000_000).Truncate(time.Hour)
	b := limit.Bucket{Key: "w", Limit: l, Hits: 1}
	warm(t, s, t0, b)
	for i := range 3 {
		// Each step, an hour and a minute on: the units of the step before
		// expire, and one is admitted.
		if _, ok := apply(t, s, t0.Add(time.Duration(i)*(time.Hour+time.Minute)), b); !ok {
			t.Fatalf("request at t0+%dh rejected", i)
		}
		settle(s) // the call for more units a request short of them made
	}
	s.sync(context.Background(), t0.Add(2*(time.Hour+time.Minute)), false)
	st := r.state("w")
	back := (st.Timestamp - t0.Add(time.Hour).UnixMicro()) / time.Hour.Microseconds()
	if back < 0 || back >= int64(len(st.Counts)) || st.Counts[back] < 1 {
		t.Fatalf("Redis counts %v (newest first, newest at %v): the sub-window t0+1h, which admitted 1, counts less",
			st.Counts, time.UnixMicro(st.Timestamp).Sub(t0))
	}
}

// gatedRemote holds the lease calls made while a gate is set until it is
// closed.
type gatedRemote struct {
	*remote
	gate  atomic.Pointer[chan struct{}]
	calls atomic.Int64 // lease calls held
}

func (r *gatedRemote) LeaseAll(ctx context.Context, now time.Time, leases []redis.Lease) (int64, error) {
	if g := r.gate.Load(); g != nil {
		r.calls.Add(1)
		<-*g
	}
	return r.remote.LeaseAll(ctx, now, leases)
}

// holdSync runs a sync whose lease call is held, and returns once the call
// is out; release lets it answer and waits for the sync to end.
func holdSync(r *gatedRemote, s *Store, now time.Time) (release func()) {
	g := make(chan struct{})
	r.gate.Store(&g)
	calls := r.calls.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.sync(context.Background(), now, false)
	}()
	for r.calls.Load() == calls {
		time.Sleep(time.Millisecond)
	}
	return func() {
		r.gate.Store(nil)
		close(g)
		<-done
	}
}

// TestUnitsGivenBackAreNotUsed gives back, at a sync, the units of a
// bucket idle long enough, while a request wants them: the request must
// not be admitted with units Redis has back, which another replica takes
// at once. The bucket never leaks: it admits 10 in all.
func TestUnitsGivenBackAreNotUsed(t *testing.T) {
	r := &gatedRemote{remote: newRemote()}
	a := newStore(t, r, time.Hour)
	b := newStore(t, r.remote, time.Hour)
	l := limit.Limit{Size: 10, DripRate: 1000 * time.Hour, DripSize: 1}
	now := time.Now()
	admitted := int64(0)
	warm(t, a, now, limit.Bucket{Key: "k", Limit: l, Hits: 5}) // the bucket's 10
	if _, ok := apply(t, a, now, limit.Bucket{Key: "k", Limit: l, Hits: 5}); ok {
		admitted += 5
	}
	for range idleHold {
		a.sync(context.Background(), now, false)
	}
	// Idle for idleHold intervals: this sync gives back the 5 units held.
	release := holdSync(r, a, now)
	res := make([]limit.Result, 1)
	applied := make(chan error, 1)
	go func() {
		applied <- a.Apply(context.Background(), now, []limit.Bucket{{Key: "k", Limit: l, Hits: 5}}, res)
	}()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
		release()
	case <-time.After(50 * time.Millisecond):
		release() // the request waits for the sync's answer
		if err := <-applied; err != nil {
			t.Fatal(err)
		}
	}
	if res[0].Admitted {
		admitted += 5
	}
	if _, ok := apply(t, b, now, limit.Bucket{Key: "k", Limit: l, Hits: 5}); ok {
		admitted += 5
	}
	if admitted > l.Size {
		t.Fatalf("admitted %d on a bucket of %d that never leaks", admitted, l.Size)
	}
}

// TestReloadDuringASync changes a bucket's limit while a sync gives back
// the units held under the old one and asks for fewer: the new limit's
// entry held none of them and owes none, so Redis is charged no more than
// was admitted.
func TestReloadDuringASync(t *testing.T) {
	r := &gatedRemote{remote: newRemote()}
	s := newStore(t, r, time.Hour)
	old := limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: 1000 * time.Hour}
	reloaded := limit.Limit{Algorithm: limit.FixedWindow, Size: 50, Window: 1000 * time.Hour}
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Hour) // within a window
	admitted := int64(0)
	try := func(l limit.Limit, hits int64) {
		if _, ok := apply(t, s, now, limit.Bucket{Key: "k", Limit: l, Hits: hits}); ok {
			admitted += hits
		}
	}
	warm(t, s, now, limit.Bucket{Key: "k", Limit: old, Hits: 10}) // holds 20
	try(old, 10)
	s.sync(context.Background(), now, false) // gives back 10, asks for 20
	try(old, 1)
	release := holdSync(r, s, now) // gives back 19, asks for 2
	applied := make(chan error, 1)
	res := make([]limit.Result, 1)
	go func() {
		applied <- s.Apply(context.Background(), now, []limit.Bucket{{Key: "k", Limit: reloaded, Hits: 1}}, res)
	}()
	time.Sleep(20 * time.Millisecond) // decided on Redis, under the new limit
	release()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if res[0].Admitted {
		admitted++
	}
	for range 3 {
		try(reloaded, 1)
	}
	settle(s)
	s.sync(context.Background(), now, true) // gives everything back, as Close
	if got := r.state("k").Counter; got != admitted {
		t.Fatalf("Redis charged %d once everything was given back, want the %d admitted", got, admitted)
	}
}

// TestRedisDownIsAnErrorForEveryRequest sends requests for a bucket
// without units while Redis is down, one of them while a call for more
// units is out: each needed Redis, so each must fail, for the failure mode
// to decide, rather than be rejected as over its limit.
func TestRedisDownIsAnErrorForEveryRequest(t *testing.T) {
	r := &gatedRemote{remote: newRemote()}
	s := newStore(t, r, time.Hour)
	now := time.Now()
	b := []limit.Bucket{{Key: "a", Limit: tenPerSecond, Hits: 1}}
	warm(t, s, now, b[0]) // holds 2
	apply(t, s, now, b[0])
	apply(t, s, now, b[0])
	r.down.Store(true)
	for i := range 3 {
		res := make([]limit.Result, 1)
		if err := s.Apply(context.Background(), now, b, res); err == nil {
			t.Fatalf("request %d, which needed Redis while it was down, got no error (admitted %v)", i+1, res[0].Admitted)
		}
	}
}

// TestBurstOnALeasedBucket sends 20 requests at once for a bucket of 100
// that holds 2 units: those the units do not cover ask Redis, which has
// room: all are admitted, as exactly, and Redis counts them once
// everything is given back.
func TestBurstOnALeasedBucket(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: 1000 * time.Hour}
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Hour) // within a window
	b := []limit.Bucket{{Key: "a", Limit: l, Hits: 1}}
	warm(t, s, now, b[0])
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			res := make([]limit.Result, 1)
			if err := s.Apply(context.Background(), now, b, res); err != nil {
				t.Error(err)
			}
			if res[0].Admitted {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	settle(s)
	if n := admitted.Load(); n != 20 {
		t.Fatalf("admitted %d of 20 requests on a bucket of 100", n)
	}
	s.sync(context.Background(), now, true)
	if got := r.state("a").Counter; got != 20 {
		t.Fatalf("Redis counts %d once everything is given back, want the 20 admitted", got)
	}
}

// TestRefundMakesNoMoreRoomThanExactly gives back hits a bucket never
// counted: as in exact mode, that makes no room, and the bucket admits
// its size and no more.
func TestRefundMakesNoMoreRoomThanExactly(t *testing.T) {
	r := newRemote()
	s := newStore(t, r, time.Hour)
	l := limit.Limit{Size: 10, DripRate: 1000 * time.Hour, DripSize: 1}
	now := time.Now()
	apply(t, s, now, limit.Bucket{Key: "a", Limit: l, Hits: -100})
	admitted := 0
	for range 200 {
		if _, ok := apply(t, s, now, limit.Bucket{Key: "a", Limit: l, Hits: 1}); ok {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d after a refund of 100 on an empty bucket of 10, want 10", admitted)
	}
}

// TestFixedWindowLeaseEndsWithItsWindowDuringACall sends requests in the
// next window while a sync, begun in the window before, is out for the
// bucket: the units of the window before are no use in this one, and
// everything admitted in it must be counted in it on Redis.
func TestFixedWindowLeaseEndsWithItsWindowDuringACall(t *testing.T) {
	r := &gatedRemote{remote: newRemote()}
	s := newStore(t, r, time.Hour)
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: time.Hour}
	t0 := time.UnixMicro(1_800_000_000_000_000).Truncate(time.Hour).Add(time.Minute)
	next := t0.Add(time.Hour)
	warm(t, s, t0, limit.Bucket{Key: "k", Limit: l, Hits: 10}) // holds 20
	apply(t, s, t0, limit.Bucket{Key: "k", Limit: l, Hits: 10})
	release := holdSync(r, s, t0.Add(58*time.Minute))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			res := make([]limit.Result, 1)
			if err := s.Apply(context.Background(), next, []limit.Bucket{{Key: "k", Limit: l, Hits: 1}}, res); err != nil {
				t.Error(err)
			}
			if res[0].Admitted {
				admitted.Add(1)
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	release()
	wg.Wait()
	s.sync(context.Background(), next, true) // gives everything back
	st := r.state("k")
	counted := st.Counter
	if st.Timestamp != next.Truncate(time.Hour).UnixMicro() {
		counted = 0
	}
	if n := admitted.Load(); n > counted {
		t.Fatalf("admitted %d in a window Redis counts %d in", n, counted)
	}
}

// answeredRemote holds the answer of its next lease call once armed, once
// Redis has run it, until release is closed.
type answeredRemote struct {
	*remote
	ran, release chan struct{}
	armed        atomic.Bool // holds only once set
	once         sync.Once
}

func (r *answeredRemote) LeaseAll(ctx context.Context, now time.Time, leases []redis.Lease) (int64, error) {
	n, err := r.remote.LeaseAll(ctx, now, leases)
	if !r.armed.Load() {
		return n, err
	}
	r.once.Do(func() {
		close(r.ran)
		<-r.release
	})
	return n, err
}

// TestResetDuringACall resets a bucket after Redis granted units of it to
// a call whose answer has not arrived: the reset bucket does not count
// them, so they must not be used, and the bucket admits its size.
func TestResetDuringACall(t *testing.T) {
	r := &answeredRemote{remote: newRemote(), ran: make(chan struct{}), release: make(chan struct{})}
	s := newStore(t, r, time.Hour)
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Window: 1000 * time.Hour}
	now := time.UnixMicro(1_800_000_000_000_000).Add(time.Hour) // within a window
	b := limit.Bucket{Key: "k", Limit: l, Hits: 1}
	warm(t, s, now, b) // holds 2
	apply(t, s, now, b)
	apply(t, s, now, b)
	r.armed.Store(true)
	asked := make(chan error, 1)
	go func() { // short of units: asks Redis, which runs the call and holds its answer
		asked <- s.Apply(context.Background(), now, []limit.Bucket{b}, make([]limit.Result, 1))
	}()
	<-r.ran
	if err := s.Reset(context.Background(), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	close(r.release)
	if err := <-asked; err != nil {
		t.Fatal(err)
	}
	settle(s)
	admitted := 0
	for range 30 {
		if _, ok := apply(t, s, now, b); ok {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d after the reset of a bucket of 10, want 10", admitted)
	}
}

// TestFailingSyncsLogOnce: while Redis is away every sync fails; the first
// failure is logged, the next ones within a minute are not.
func TestFailingSyncsLogOnce(t *testing.T) {
	var buf bytes.Buffer
	s, err := New(newRemote(), Options{Interval: time.Hour, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	down := errors.New("down")
	for range 3 {
		s.warnSyncFailed(1, down)
	}
	if n := strings.Count(buf.String(), "a sync with Redis failed"); n != 1 {
		t.Fatalf("%d warnings for 3 failed syncs, want 1:\n%s", n, buf.String())
	}
}
