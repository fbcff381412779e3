package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

// primary is a shared store that fails while down is set.
type primary struct {
	down   atomic.Bool
	calls  atomic.Int64
	resets atomic.Int64
}

var errDown = errors.New("connection refused")

func (p *primary) Apply(ctx context.Context, _ time.Time, _ []limit.Bucket, results []limit.Result) error {
	p.calls.Add(1)
	if p.down.Load() {
		return errDown
	}
	for i := range results {
		results[i] = limit.Result{Admitted: true, Remaining: 42}
	}
	return nil
}

func (p *primary) Check(context.Context) error {
	if p.down.Load() {
		return errDown
	}
	return nil
}

func (p *primary) State(_ context.Context, now time.Time, _ []limit.Bucket, states []limit.State) (time.Time, error) {
	if p.down.Load() {
		return now, errDown
	}
	clear(states)
	return now, nil
}

func (p *primary) Reset(context.Context, []string) error {
	p.resets.Add(1)
	if p.down.Load() {
		return errDown
	}
	return nil
}

func (p *primary) Close() error { return nil }

func TestSwitching(t *testing.T) {
	p := &primary{}
	var switches []bool
	s := New(p, Options{Logger: slog.New(slog.DiscardHandler), OnSwitch: func(local bool) { switches = append(switches, local) }})
	defer s.Close()
	ctx := context.Background()
	l := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	apply := func() limit.Result {
		t.Helper()
		r := make([]limit.Result, 1)
		if err := s.Apply(ctx, time.Now(), []limit.Bucket{{Key: "k", Limit: l, Hits: 1}}, r); err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	if r := apply(); r.Remaining != 42 {
		t.Fatalf("with the primary up: %+v", r)
	}
	p.down.Store(true)
	// The failing call is decided locally, and so are the next ones,
	// without asking the primary.
	if r := apply(); !r.Admitted || r.Remaining != 0 {
		t.Fatalf("first local call: %+v", r)
	}
	calls := p.calls.Load()
	if r := apply(); r.Admitted {
		t.Fatalf("second local call on a bucket of 1: %+v", r)
	}
	if p.calls.Load() != calls || !s.Local() {
		t.Fatal("the primary was asked while falling back")
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check while falling back: %v, want nil: the service answers", err)
	}
	p.down.Store(false)
	s.Check(ctx)
	if s.Local() {
		t.Fatal("still local after the primary answered a check")
	}
	if r := apply(); r.Remaining != 42 {
		t.Fatalf("back on the primary: %+v", r)
	}
	if len(switches) != 2 || !switches[0] || switches[1] {
		t.Fatalf("switches reported: %v", switches)
	}
	// A failed check switches before any call fails.
	p.down.Store(true)
	s.Check(ctx)
	if !s.Local() {
		t.Fatal("a failed check did not switch to local")
	}
}

func TestEndedCallDoesNotSwitch(t *testing.T) {
	p := &primary{}
	p.down.Store(true)
	s := New(p, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := make([]limit.Result, 1)
	if err := s.Apply(ctx, time.Now(), []limit.Bucket{{Key: "k", Limit: limit.Limit{Size: 1, DripRate: time.Second, DripSize: 1}, Hits: 1}}, r); err == nil {
		t.Fatal("a call that had ended was answered")
	}
	if s.Local() {
		t.Fatal("a call that had ended switched the store to local")
	}
}

// slowPrimary answers only when the call has ended.
type slowPrimary struct{ primary }

func (p *slowPrimary) Apply(ctx context.Context, _ time.Time, _ []limit.Bucket, _ []limit.Result) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestSlowPrimaryLeavesTimeToDecideLocally: with a deadline shorter than
// the timeout (Envoy's 20 ms against 100 ms), a Primary that does not
// answer gets half the time, and the call is decided locally in the rest.
func TestSlowPrimaryLeavesTimeToDecideLocally(t *testing.T) {
	s := New(&slowPrimary{}, Options{Timeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer cancel()
	r := make([]limit.Result, 1)
	b := []limit.Bucket{{Key: "k", Limit: limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}, Hits: 1}}
	if err := s.Apply(ctx, time.Now(), b, r); err != nil {
		t.Fatalf("a slow primary within the call's deadline: %v, want a local answer", err)
	}
	if !s.Local() || !r[0].Admitted {
		t.Fatalf("local %v, result %+v: want decided locally", s.Local(), r[0])
	}
}

// TestLocalStoreBoundedInBytes: a flood of long keys while the primary
// fails fills the local store up to its byte bound, never past it.
func TestLocalStoreBoundedInBytes(t *testing.T) {
	p := &primary{}
	p.down.Store(true)
	const bound = 1 << 20
	s := New(p, Options{Local: memory.Options{MaxBytes: bound}, Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	l := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	r := make([]limit.Result, 1)
	for i := range 10_000 {
		key := fmt.Sprintf("api|user=%01000d", i)
		if err := s.Apply(context.Background(), time.Now(), []limit.Bucket{{Key: key, Limit: l, Hits: 1}}, r); err != nil {
			t.Fatal(err)
		}
		if !r[0].Admitted {
			t.Fatalf("key %d, new, not admitted", i)
		}
	}
	if !s.Local() || s.Bytes() > bound || s.Bytes() < bound/2 {
		t.Errorf("local %v, %d bytes: want the local store filled up to %d and no more", s.Local(), s.Bytes(), bound)
	}
	if want := int64(s.Len()) * (1009 + memory.BucketOverhead); s.Bytes() != want {
		t.Errorf("%d buckets of 1009-byte keys count %d bytes, want %d", s.Len(), s.Bytes(), want)
	}
}

// memoryPrimary is a primary that answers, a memory store, with the
// Check a shared store has.
type memoryPrimary struct{ *memory.Store }

// TestConformance runs the store suite through the fallback store both
// ways a request can go: to a primary that answers, and, with the primary
// down, to the local store.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		m, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := New(memoryPrimary{m}, Options{Logger: quiet})
		t.Cleanup(func() { s.Close() })
		return s
	})
	t.Run("PrimaryDown", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) storetest.Store { return downStore(t) })
	})
}

// downStore returns a store whose primary is down: it decides locally.
func downStore(t *testing.T) *Store {
	p := &primary{}
	p.down.Store(true)
	s := New(p, Options{Logger: slog.New(slog.DiscardHandler)})
	if err := s.Check(context.Background()); err != nil || !s.Local() {
		t.Fatalf("with the primary down: local %v, %v", s.Local(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestInspect runs the suite of State and Reset through the fallback
// store both ways, as TestConformance.
func TestInspect(t *testing.T) {
	storetest.RunInspect(t, func(t *testing.T) storetest.Inspector {
		m, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := New(memoryPrimary{m}, Options{Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { s.Close() })
		return s
	})
	t.Run("PrimaryDown", func(t *testing.T) {
		storetest.RunInspect(t, func(t *testing.T) storetest.Inspector { return &resetsLocally{downStore(t)} })
	})
}

// resetsLocally is a store falling back whose Reset, which fails on the
// primary that is down, has reset the local store: the suite sees that.
type resetsLocally struct{ *Store }

func (s *resetsLocally) Reset(ctx context.Context, keys []string) error {
	if err := s.Store.Reset(ctx, keys); !errors.Is(err, errDown) {
		return fmt.Errorf("Reset with the primary down: %v, want its error", err)
	}
	return nil
}

// watchingPrimary is a primary that hears of resets.
type watchingPrimary struct {
	primary
	keys []string
}

func (p *watchingPrimary) WatchResets(_ context.Context, forget func([]string)) { forget(p.keys) }

func TestWatchResetsIsPrimarys(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	p := &watchingPrimary{keys: []string{"api|user=a"}}
	var got []string
	New(p, Options{Logger: quiet}).WatchResets(context.Background(), func(keys []string) { got = keys })
	if fmt.Sprint(got) != "[api|user=a]" {
		t.Errorf("forgot %q, want the primary's keys", got)
	}
	// A primary that hears of none: nothing to watch, and it returns.
	New(&primary{}, Options{Logger: quiet}).WatchResets(context.Background(), func([]string) { t.Error("told to forget") })
}

// TestSwitchesForgetEverything: each switch, to the local store and back,
// tells WatchResets' callback to forget every bucket (an over-limit cache
// must not keep refusing, on Redis, what the local store refused), and
// again once the calls still on the local store are done; not after the
// watch ends.
func TestSwitchesForgetEverything(t *testing.T) {
	p := &primary{}
	s := New(p, Options{Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var forgot atomic.Int64
	s.WatchResets(ctx, func(keys []string) {
		if keys != nil {
			t.Errorf("told to forget %q, want every bucket (nil)", keys)
		}
		forgot.Add(1)
	})
	r := make([]limit.Result, 1)
	b := []limit.Bucket{{Key: "k", Limit: limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}, Hits: 1}}
	p.down.Store(true)
	if err := s.Apply(ctx, time.Now(), b, r); err != nil || !s.Local() {
		t.Fatalf("with the primary down: %v, local %v", err, s.Local())
	}
	if n := forgot.Load(); n != 1 {
		t.Fatalf("forgot %d times at the switch to local, want 1", n)
	}
	p.down.Store(false)
	if err := s.Check(ctx); err != nil || s.Local() {
		t.Fatalf("with the primary back: %v, local %v", err, s.Local())
	}
	if n := forgot.Load(); n != 2 {
		t.Fatalf("forgot %d times after the switch back, want 2", n)
	}
	deadline := time.Now().Add(3 * time.Second)
	for forgot.Load() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("forgot %d times 3s after the switch back, want 3 (again once the local store closed)", forgot.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	time.Sleep(10 * time.Millisecond)
	p.down.Store(true)
	s.Apply(context.Background(), time.Now(), b, r)
	if n := forgot.Load(); n != 3 {
		t.Fatalf("forgot %d times after the watch ended, want 3", n)
	}
}
