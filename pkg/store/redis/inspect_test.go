package redis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

// inspectModes runs the suite of State and Reset in both modes on stores
// that reach Redis as connect says.
func inspectModes(t *testing.T, connect ClientOptions) {
	for _, mode := range []Mode{ScriptMode, TransactionsMode} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			n := 0
			storetest.RunInspect(t, func(t *testing.T) storetest.Inspector {
				n++
				c := connect
				s, err := New(Options{Connect: &c, Mode: mode, CallerClock: true, Prefix: fmt.Sprintf("inspect%d-%d:", mode, n)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

func TestInspectSingle(t *testing.T) {
	srv := redistest.Start(t)
	inspectModes(t, ClientOptions{URL: srv.URL()})
}

func TestInspectCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	inspectModes(t, ClientOptions{URL: cl.URL(), Cluster: true})
}

// TestStateOnServerClock: without CallerClock, State reads at the Redis
// server's time, as Apply decides.
func TestStateOnServerClock(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b := []limit.Bucket{{Key: "api|u=a", Limit: limit.Limit{Size: 5, DripRate: time.Hour, DripSize: 1}, Hits: 2}}
	if err := s.Apply(ctx, time.Time{}, b, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	states := make([]limit.State, 1)
	at, err := s.State(ctx, time.Time{}, b, states)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(at); d < -time.Minute || d > time.Minute {
		t.Errorf("State read at %s, not the server's time (now is %s)", at, time.Now())
	}
	if states[0].Counter != 2 || time.UnixMicro(states[0].Timestamp).After(at) {
		t.Errorf("state %+v read at %s, want 2 charged before", states[0], at)
	}
}

// forgotten gathers what WatchResets passes on.
type forgotten struct {
	mu   sync.Mutex
	keys [][]string
	all  int // forget(nil): every key
}

func (f *forgotten) forget(keys []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if keys == nil {
		f.all++
		return
	}
	f.keys = append(f.keys, keys)
}

func (f *forgotten) waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		ok := done()
		f.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, still waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchResets: a reset through one store reaches the watchers of every
// store on the same Redis and prefix, and none on another prefix; once the
// subscription is made again (Redis restarted), the watcher is told to
// forget every key, since resets made meanwhile were missed.
func TestWatchResets(t *testing.T) {
	srv := redistest.New(t)
	srv.Restart()
	open := func(prefix string) *Store {
		s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b, other := open("w:"), open("w:"), open("x:")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fb, fother forgotten
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { b.WatchResets(ctx, fb.forget) })
	wg.Go(func() { other.WatchResets(ctx, fother.forget) })
	admin := srv.Client(t)
	subscribed := func(channel string) bool {
		n, err := admin.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] == 1
	}
	fb.waitFor(t, "the subscriptions", func() bool { return subscribed("w:resets") && subscribed("x:resets") })

	keys := []string{"api|u=a", "api|u=a|x=1"}
	if err := a.Reset(ctx, keys); err != nil {
		t.Fatal(err)
	}
	fb.waitFor(t, "the reset to reach the other store", func() bool { return len(fb.keys) == 1 })
	if !slices.Equal(fb.keys[0], keys) || fb.all != 0 {
		t.Errorf("told to forget %q and all %d times, want %q once", fb.keys, fb.all, keys)
	}

	srv.Stop()
	srv.Restart()
	fb.waitFor(t, "forgetting every key after the subscription is made again", func() bool { return fb.all > 0 })
	if err := a.Reset(ctx, keys[:1]); err != nil {
		t.Fatal(err)
	}
	fb.waitFor(t, "the next reset", func() bool { return len(fb.keys) == 2 })

	// A reset of more keys than one message names arrives whole, in order.
	many := make([]string, 2*resetMessageKeys+500)
	for i := range many {
		many[i] = fmt.Sprintf("api|u=%d", i)
	}
	if err := a.Reset(ctx, many); err != nil {
		t.Fatal(err)
	}
	fb.waitFor(t, "a reset of many keys", func() bool { return len(fb.keys) == 5 })
	fb.mu.Lock()
	if got := slices.Concat(fb.keys[2:]...); !slices.Equal(got, many) {
		t.Errorf("a reset of %d keys arrived as %d keys in %d messages", len(many), len(got), len(fb.keys)-2)
	}
	fb.mu.Unlock()
	fother.mu.Lock()
	defer fother.mu.Unlock()
	if len(fother.keys) != 0 {
		t.Errorf("a store on another prefix was told of resets: %q", fother.keys)
	}
}
