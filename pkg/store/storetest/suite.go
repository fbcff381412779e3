// Package storetest is the conformance suite every store passes, for
// tests only: it is not a store. Step tables on fixed instants for every
// algorithm, the all-or-nothing rule, shadow buckets, isolation of keys
// whatever their bytes, and exact admission counts under concurrency. A
// store that passes answers exactly as limit.DecideAll applied atomically.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Store is what the suite exercises: the method the service calls.
type Store interface {
	// Apply decides buckets at now atomically and charges them only if the
	// request is admitted; results[i] is the outcome for buckets[i].
	Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error
}

// NewStore returns an empty store for one subtest. The store must decide at
// the instant it is given (a store with its own clock needs a test mode that
// takes the caller's); the suite registers no cleanup, so newStore should.
type NewStore func(t *testing.T) Store

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore NewStore) {
	t.Run("StepTables", func(t *testing.T) { runTables(t, newStore, tables()) })
	t.Run("KeysAreIsolated", func(t *testing.T) { testIsolation(t, newStore(t)) })
	t.Run("LimitChangeKeepsCounter", func(t *testing.T) { testLimitChange(t, newStore(t)) })
	t.Run("CanceledContextChangesNothing", func(t *testing.T) { testCanceled(t, newStore(t)) })
	t.Run("ConcurrentOneBucket", func(t *testing.T) { testConcurrentOneBucket(t, newStore(t)) })
	t.Run("ConcurrentHierarchy", func(t *testing.T) { testConcurrentHierarchy(t, newStore(t)) })
	t.Run("WindowTables", func(t *testing.T) { runTables(t, newStore, windowTables()) })
	t.Run("ConcurrentWindows", func(t *testing.T) { testConcurrentWindows(t, newStore) })
	t.Run("ConcurrentMixedHierarchy", func(t *testing.T) { testConcurrentMixed(t, newStore(t)) })
	t.Run("ChargeAlwaysTables", func(t *testing.T) { runTables(t, newStore, chargeTables()) })
	t.Run("CalendarTables", func(t *testing.T) { runTables(t, newStore, calendarTables()) })
	t.Run("ConcurrentCharges", func(t *testing.T) { testConcurrentCharges(t, newStore) })
}

// T0 is the instant the suite's tables start from.
var T0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

const ms = time.Millisecond

// call is one Apply at T0+at; want has one outcome per bucket.
type call struct {
	at      time.Duration
	buckets []limit.Bucket
	want    []outcome
}

// outcome is what the suite checks of a limit.Result.
type outcome struct {
	admitted  bool
	remaining int64
	clear     time.Duration
	reset     time.Duration
}

func (o outcome) String() string {
	return fmt.Sprintf("{admitted:%v remaining:%d clear:%s reset:%s}", o.admitted, o.remaining, o.clear, o.reset)
}

func bucket(key string, l limit.Limit, hits int64) limit.Bucket {
	return limit.Bucket{Key: key, Limit: l, Hits: hits}
}

func shadow(b limit.Bucket) limit.Bucket {
	b.Shadow = true
	return b
}

// apply calls the store and returns the outcomes, failing the test on error.
func apply(t *testing.T, s Store, now time.Time, buckets []limit.Bucket) []outcome {
	t.Helper()
	results := make([]limit.Result, len(buckets))
	if err := s.Apply(context.Background(), now, buckets, results); err != nil {
		t.Fatalf("Apply at %s: %v", now.Format(time.StampMicro), err)
	}
	out := make([]outcome, len(results))
	for i, r := range results {
		checkResult(t, buckets[i], r)
		out[i] = outcome{r.Admitted, r.Remaining, r.Clear, r.Reset}
	}
	return out
}

// checkResult checks what the tables do not spell out: the state and TTL
// agree with the reported figures.
func checkResult(t *testing.T, b limit.Bucket, r limit.Result) {
	t.Helper()
	if b.Limit.Algorithm != limit.LeakyBucket {
		switch {
		case r.TTL != r.Clear:
			t.Fatalf("window %q: TTL %s, want clear %s", b.Key, r.TTL, r.Clear)
		case r.Admitted && (r.Remaining < 0 || r.Remaining > b.Limit.Size):
			t.Fatalf("window %q: remaining %d of %d", b.Key, r.Remaining, b.Limit.Size)
		case !r.Admitted && (r.Remaining != 0 || r.Reset <= 0):
			t.Fatalf("window %q: rejected with remaining %d and reset %s", b.Key, r.Remaining, r.Reset)
		}
		return
	}
	switch {
	case r.State.Counter == 0 && (r.TTL != 0 || r.Clear != 0):
		t.Fatalf("bucket %q: empty, but TTL %s and clear %s", b.Key, r.TTL, r.Clear)
	case r.State.Counter > 0 && r.TTL != min(r.Clear+b.Limit.DripRate, saturated):
		t.Fatalf("bucket %q: TTL %s, want clear %s plus one drip %s", b.Key, r.TTL, r.Clear, b.Limit.DripRate)
	case r.Admitted && r.Remaining != max(0, b.Limit.Size-r.State.Counter):
		t.Fatalf("bucket %q: remaining %d with counter %d of %d", b.Key, r.Remaining, r.State.Counter, b.Limit.Size)
	case !r.Admitted && (r.Remaining != 0 || r.Reset <= 0):
		t.Fatalf("bucket %q: rejected with remaining %d and reset %s", b.Key, r.Remaining, r.Reset)
	}
}

func runTables(t *testing.T, newStore NewStore, tables []table) {
	for _, tc := range tables {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for i, c := range tc.calls {
				got := apply(t, s, T0.Add(c.at), c.buckets)
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("step %d (T0+%s): got %v, want %v", i, c.at, got, c.want)
				}
			}
		})
	}
}

func testIsolation(t *testing.T, s Store) {
	l := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	// Keys that differ only in bytes a careless store might treat specially.
	keys := []string{
		"api|user=a", "api|user=a ", "api|user=A", "api|user=a\n", "api|user=a\x00",
		"{api|user=a}", "api|user=a:1", "api|user=ä", "api|user=a|action=x",
		"api|user=%7Ba%7D", "", "*", "api|user=a*",
	}
	for i, k := range keys {
		got := apply(t, s, T0, []limit.Bucket{bucket(k, l, 1)})
		if !got[0].admitted {
			t.Fatalf("key %d %q: first request rejected: another key shares its bucket", i, k)
		}
	}
	for i, k := range keys {
		got := apply(t, s, T0, []limit.Bucket{bucket(k, l, 1)})
		if got[0].admitted {
			t.Fatalf("key %d %q: second request admitted: the bucket was not kept", i, k)
		}
	}
}

func testLimitChange(t *testing.T, s Store) {
	big := limit.Limit{Size: 10, DripRate: time.Second, DripSize: 1}
	small := limit.Limit{Size: 3, DripRate: time.Second, DripSize: 1}
	apply(t, s, T0, []limit.Bucket{bucket("k", big, 6)})
	// After a reload shrinks the limit, the bucket holds more than its size:
	// it is over the limit until it has drained below the new size.
	want := []outcome{{false, 0, 5 * time.Second, 3 * time.Second}}
	if got := apply(t, s, T0.Add(time.Second), []limit.Bucket{bucket("k", small, 1)}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after shrinking: got %v, want %v", got, want)
	}
	want = []outcome{{true, 0, 3 * time.Second, 0}}
	if got := apply(t, s, T0.Add(4*time.Second), []limit.Bucket{bucket("k", small, 1)}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after draining: got %v, want %v", got, want)
	}
}

func testCanceled(t *testing.T, s Store) {
	l := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results := make([]limit.Result, 1)
	if err := s.Apply(ctx, T0, []limit.Bucket{bucket("k", l, 1)}, results); err == nil {
		t.Fatal("Apply with a canceled context succeeded")
	}
	if got := apply(t, s, T0, []limit.Bucket{bucket("k", l, 1)}); !got[0].admitted {
		t.Fatal("the canceled call charged the bucket")
	}
}

// workers is the number of concurrent callers in the concurrency tests.
const workers = 200

func testConcurrentOneBucket(t *testing.T, s Store) {
	raceOneBucket(t, s, limit.Limit{Size: 100, DripRate: time.Hour, DripSize: 1})
}

// raceOneBucket has workers callers race for one bucket of limit l (of
// 100) and wants exactly 100 admitted.
func raceOneBucket(t *testing.T, s Store, l limit.Limit) {
	var admitted atomic.Int64
	parallel(t, workers, func(int) error {
		results := make([]limit.Result, 1)
		if err := s.Apply(context.Background(), T0, []limit.Bucket{bucket("hot", l, 1)}, results); err != nil {
			return err
		}
		if results[0].Admitted {
			admitted.Add(1)
		}
		return nil
	})
	if got := admitted.Load(); got != 100 {
		t.Fatalf("%d concurrent calls on %v admitted %d, want exactly 100", workers, l, got)
	}
}

func testConcurrentHierarchy(t *testing.T, s Store) {
	user := limit.Limit{Size: 50, DripRate: time.Hour, DripSize: 1}
	trade := limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	tr, ot := racePaths(t, s,
		[]limit.Bucket{bucket("api|user=alex", user, 1), bucket("api|user=alex|action=trade", trade, 1)},
		[]limit.Bucket{bucket("api|user=alex", user, 1), bucket("api|user=alex|action=view", user, 1)})
	if tr > 10 || tr+ot != 50 {
		t.Fatalf("admitted %d trades and %d views, want at most 10 trades and exactly 50 in all", tr, ot)
	}
	// Rejected requests charged nothing: the user bucket holds exactly the
	// admitted requests, and so does the trade bucket.
	got := apply(t, s, T0, []limit.Bucket{bucket("api|user=alex", user, 0), bucket("api|user=alex|action=trade", trade, 0)})
	if got[0].clear != 50*time.Hour || got[1].clear != time.Duration(tr)*time.Hour {
		t.Fatalf("after the run: got %v, want the user bucket holding 50 and the trade bucket %d", got, tr)
	}
}

// racePaths has workers callers race, the even ones sending request a,
// the odd ones b, and counts the admitted of each.
func racePaths(t *testing.T, s Store, a, b []limit.Bucket) (admittedA, admittedB int64) {
	var na, nb atomic.Int64
	parallel(t, workers, func(i int) error {
		req, count := a, &na
		if i%2 == 1 {
			req, count = b, &nb
		}
		results := make([]limit.Result, len(req))
		if err := s.Apply(context.Background(), T0, req, results); err != nil {
			return err
		}
		for _, r := range results {
			if !r.Admitted {
				return nil
			}
		}
		count.Add(1)
		return nil
	})
	return na.Load(), nb.Load()
}

// parallel runs f(0..n-1) in n goroutines released together.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var (
		start sync.WaitGroup
		done  sync.WaitGroup
		mu    sync.Mutex
		errs  []error
	)
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	start.Done()
	done.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d calls failed, first: %v", len(errs), n, errs[0])
	}
}
