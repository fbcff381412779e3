package rls

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// recorder is an Observer that writes down what it is told.
type recorder struct {
	mu       sync.Mutex
	calls    []string
	limits   []string
	stores   []string // "store op"
	cached   int
	failures []string
}

func (r *recorder) Call(domain, outcome string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, domain+" "+outcome)
}

func (r *recorder) Limit(domain string, rule *descriptors.Rule, key string, _ int64, res *limit.Result, shadow bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limits = append(r.limits, fmt.Sprintf("%s %s admitted=%v shadow=%v", domain, rule.MetricLabel(key), res.Admitted, shadow))
}

func (r *recorder) Store(store, op string, _ time.Duration, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stores = append(r.stores, store+" "+op)
}
func (r *recorder) CacheHit() { r.mu.Lock(); r.cached++; r.mu.Unlock() }
func (r *recorder) FailureAnswer(m FailureMode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, m.String())
}

func TestObserver(t *testing.T) {
	rec := &recorder{}
	svc, _ := newService(t, Options{Observer: rec})
	ctx := context.Background()
	for range 4 {
		svc.ShouldRateLimit(ctx, request("api", desc("user=alice", "action=trade"), desc("plan=free")))
	}
	svc.ShouldRateLimit(ctx, request("web", desc("user=alice")))
	svc.ShouldRateLimit(ctx, request("api", desc("=x")))
	svc.ShouldRateLimit(ctx, request("", desc("a=b")))
	want := []string{"api OK", "api OK", "api OK", "api OVER_LIMIT", " OK", "api InvalidArgument", " InvalidArgument"}
	if strings.Join(rec.calls, ",") != strings.Join(want, ",") {
		t.Errorf("calls: %q, want %q", rec.calls, want)
	}
	if len(rec.limits) != 12 || rec.limits[10] != "api trades admitted=false shadow=false" ||
		rec.limits[11] != "api plan admitted=false shadow=true" || rec.limits[0] != "api user admitted=true shadow=false" {
		t.Errorf("limits: %q", rec.limits)
	}
	if got := strings.Join(rec.stores, ","); got != "memory apply,memory apply,memory apply,memory apply" {
		t.Errorf("store calls observed: %s, want 4 applies on the memory store", got)
	}
}

// TestObserverStoreOps: a request the over-limit cache rejects has its
// other descriptors peeked at, which the observer is told apart from
// applies; a store without a name is "store".
func TestObserverStoreOps(t *testing.T) {
	mem, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	unnamed := storeFunc(mem.Apply)
	for _, c := range []struct {
		store Store
		name  string
	}{{mem, "memory"}, {unnamed, "store"}} {
		rec := &recorder{}
		svc, _ := newService(t, Options{Store: c.store, OverLimitCacheSize: 100, Observer: rec})
		ctx := context.Background()
		for range 4 { // the fourth trade is over the limit, and cached
			svc.ShouldRateLimit(ctx, request("api", desc("user="+c.name, "action=trade")))
		}
		svc.ShouldRateLimit(ctx, request("api", desc("user="+c.name, "action=trade"), desc("hot=x")))
		want := strings.Repeat(c.name+" apply,", 4) + c.name + " peek"
		if got := strings.Join(rec.stores, ","); got != want || rec.cached != 1 {
			t.Errorf("store calls observed: %s (%d cache hits), want %s", got, rec.cached, want)
		}
	}
}

func failingStore(err error) Store {
	return storeFunc(func(context.Context, time.Time, []limit.Bucket, []limit.Result) error { return err })
}

func TestFailureModes(t *testing.T) {
	down := failingStore(errors.New("redis: connection refused"))
	req := request("api", desc("user=alice", "action=trade"), desc("nothing=here"), desc("plan=free"))
	cases := []struct {
		mode FailureMode
		want string
	}{
		{FailAllow, "OK [OK; OK; OK]"},
		{FailDeny, "OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=0s; OK; OK]"},
	}
	for _, c := range cases {
		rec := &recorder{}
		svc, _ := newService(t, Options{Store: down, FailureMode: c.mode, Observer: rec})
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%v: %v", c.mode, err)
		}
		if got := render(resp); got != c.want {
			t.Errorf("%v: got %s, want %s", c.mode, got, c.want)
		}
		if len(rec.failures) != 1 || rec.failures[0] != c.mode.String() {
			t.Errorf("%v: failure answers observed: %v", c.mode, rec.failures)
		}
	}
	svc, _ := newService(t, Options{Store: down})
	if _, err := svc.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("unavailable mode: %v", err)
	}
}

func TestStoreTimeout(t *testing.T) {
	stuck := storeFunc(func(ctx context.Context, _ time.Time, _ []limit.Bucket, _ []limit.Result) error {
		<-ctx.Done()
		return ctx.Err()
	})
	svc, _ := newService(t, Options{Store: stuck, StoreTimeout: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a")))
	if status.Code(err) != codes.Unavailable || time.Since(start) > 2*time.Second {
		t.Fatalf("a stuck store gave %v after %s, want Unavailable after the 20ms store timeout", err, time.Since(start))
	}
}

func TestGlobalShadowMode(t *testing.T) {
	rec := &recorder{}
	svc, _ := newService(t, Options{Shadow: true, Observer: rec})
	for i := range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), request("api", desc("client=abuser")))
		if err != nil || render(resp) != "OK [OK]" {
			t.Fatalf("call %d: %v %v, want OK without limits", i, render(resp), err)
		}
	}
	if len(rec.limits) != 3 || rec.limits[2] != "api client=abuser admitted=false shadow=true" {
		t.Fatalf("limits observed: %q, want the deny list reported as a shadow rejection", rec.limits)
	}
}

// countingStore counts the calls that reach a memory store.
type countingStore struct {
	*memory.Store
	calls atomic.Int64
}

func (c *countingStore) Apply(ctx context.Context, now time.Time, b []limit.Bucket, r []limit.Result) error {
	c.calls.Add(1)
	return c.Store.Apply(ctx, now, b, r)
}

func TestOverLimitCache(t *testing.T) {
	mem, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &countingStore{Store: mem}
	rec := &recorder{}
	svc, clk := newService(t, Options{Store: store, OverLimitCacheSize: 100, Observer: rec})
	ctx := context.Background()
	call := func(at time.Duration, req *rlsv3.RateLimitRequest) string {
		t.Helper()
		clk.now = t0.Add(at)
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return render(resp)
	}
	trade := request("api", desc("user=alice", "action=trade"))
	for range 3 {
		call(0, trade)
	}
	// The fourth trade is rejected by the store, and cached until 2s.
	if got := call(0, trade); !strings.HasPrefix(got, "OVER_LIMIT") || store.calls.Load() != 4 {
		t.Fatalf("fourth trade: %s after %d store calls", got, store.calls.Load())
	}
	// Until then the cache answers, with the figures it knows: the trade
	// level's; the user level was not looked at.
	want := "OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=500ms] X-RateLimit-Remaining=0 X-RateLimit-Clear=4.5 X-RateLimit-Reset=0.5 Retry-After=1"
	if got := call(1500*time.Millisecond, trade); got != want || store.calls.Load() != 4 || rec.cached != 1 {
		t.Fatalf("from the cache: %s, %d store calls, %d cache hits; want %s, 4 store calls", got, store.calls.Load(), rec.cached, want)
	}
	// A check without charge, or another descriptor, goes to the store.
	call(1500*time.Millisecond, request("api", withHits(desc("user=alice", "action=trade"), 0, false)))
	call(1500*time.Millisecond, request("api", desc("user=alice")))
	if store.calls.Load() != 6 {
		t.Fatalf("%d store calls, want 6: peeks and other buckets are not answered from the cache", store.calls.Load())
	}
	// At the reset, the store is asked again, and admits.
	if got := call(2*time.Second, trade); !strings.HasPrefix(got, "OK") || store.calls.Load() != 7 {
		t.Fatalf("at the reset: %s after %d store calls", got, store.calls.Load())
	}
	// Refunds through this service drop the entry.
	call(2*time.Second, trade)
	call(2*time.Second, request("api", withHits(desc("user=alice", "action=trade"), 1, true)))
	if got := call(2*time.Second, trade); !strings.HasPrefix(got, "OK") {
		t.Fatalf("after a refund: %s, want the store to admit", got)
	}
	// So does a new config, whose limits may be larger.
	call(2*time.Second, trade)
	svc.SetConfig(loadConfig(t, strings.Replace(testConfig, "size: 3, drip_rate: 2s", "size: 30, drip_rate: 2s", 1)))
	if got := call(2*time.Second, trade); !strings.HasPrefix(got, "OK") {
		t.Fatalf("after a config with a larger trade limit: %s", got)
	}
}

// TestOverLimitCacheNeverAdmits: the cache only rejects, and only what the
// store would reject: under random traffic, every answer from the cache
// matches what the store says at that instant.
func TestOverLimitCacheNeverAdmits(t *testing.T) {
	mem, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &countingStore{Store: mem}
	svc, clk := newService(t, Options{Store: store, OverLimitCacheSize: 100})
	shadowSvc, _ := newService(t, Options{Store: mem, Clock: clk.Now}) // asks the store, never caches
	ctx := context.Background()
	at := time.Duration(0)
	for i := range 3000 {
		at += time.Duration(i%7) * 50 * time.Millisecond
		clk.now = t0.Add(at)
		hits := uint64(1 + i%3)
		req := request("api", withHits(desc(fmt.Sprintf("user=u%d", i%3), "action=trade"), hits, false))
		before := store.calls.Load()
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if store.calls.Load() == before { // answered from the cache
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("call %d: the cache admitted", i)
			}
			// What the store holds now, asked without charging.
			check, err := shadowSvc.ShouldRateLimit(ctx, request("api", withHits(desc(fmt.Sprintf("user=u%d", i%3), "action=trade"), 0, false)))
			if err != nil {
				t.Fatal(err)
			}
			if left := check.GetStatuses()[0].GetLimitRemaining(); uint64(left) >= hits {
				t.Fatalf("call %d: the cache rejected %d hits while the store has room for %d", i, hits, left)
			}
		}
	}
	if store.calls.Load() == 3000 {
		t.Fatal("the cache answered nothing: the test proves nothing")
	}
}

// TestOverLimitCacheOfAnOldConfig: a call decided under the old config that
// ends after a reload must not leave its answer for the new config.
func TestOverLimitCacheOfAnOldConfig(t *testing.T) {
	mem, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var block atomic.Bool
	decided, resume := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	store := storeFunc(func(ctx context.Context, now time.Time, b []limit.Bucket, r []limit.Result) error {
		calls.Add(1)
		err := mem.Apply(ctx, now, b, r)
		if block.Load() {
			close(decided)
			<-resume
		}
		return err
	})
	svc, _ := newService(t, Options{Store: store, OverLimitCacheSize: 100})
	ctx := context.Background()
	trade := request("api", desc("user=alice", "action=trade"))
	for range 3 {
		svc.ShouldRateLimit(ctx, trade)
	}
	block.Store(true)
	done := make(chan string)
	go func() {
		resp, err := svc.ShouldRateLimit(ctx, trade)
		if err != nil {
			t.Error(err)
		}
		done <- render(resp)
	}()
	<-decided
	block.Store(false)
	svc.SetConfig(loadConfig(t, strings.Replace(testConfig, "size: 3, drip_rate: 2s", "size: 30, drip_rate: 2s", 1)))
	close(resume)
	if got := <-done; !strings.HasPrefix(got, "OVER_LIMIT") {
		t.Fatalf("the call under the old config: %s, want OVER_LIMIT", got)
	}
	resp, err := svc.ShouldRateLimit(ctx, trade)
	if err != nil || !strings.HasPrefix(render(resp), "OK") || calls.Load() != 5 {
		t.Fatalf("under the new config: %s %v after %d store calls, want OK from the store (5 calls)", render(resp), err, calls.Load())
	}
}

// TestOverLimitCacheAnswersOnlyWhatItKnows: an entry for 1 hit does not
// answer 2 hits (their reset is later), and a request that also checks a
// bucket without charging it asks the store.
func TestOverLimitCacheAnswersOnlyWhatItKnows(t *testing.T) {
	mem, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &countingStore{Store: mem}
	svc, clk := newService(t, Options{Store: store, OverLimitCacheSize: 100})
	ctx := context.Background()
	call := func(req *rlsv3.RateLimitRequest) string {
		t.Helper()
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return render(resp)
	}
	trade := desc("user=alice", "action=trade")
	for range 4 {
		call(request("api", trade)) // the fourth is rejected and cached
	}
	clk.now = t0.Add(time.Second)
	want := call(request("api", withHits(trade, 2, false))) // from the store
	if store.calls.Load() != 5 {
		t.Fatalf("2 hits against an entry for 1: %d store calls, want 5", store.calls.Load())
	}
	if !strings.Contains(want, "reset=3s") {
		t.Fatalf("2 hits: %s, want the store's reset of 3s", want)
	}
	got := call(request("api", trade, withHits(desc("user=bob"), 0, false)))
	if store.calls.Load() != 6 || strings.Count(got, "left=") != 2 {
		t.Fatalf("with a peek: %s after %d store calls, want the store asked (6) and the peek's figures", got, store.calls.Load())
	}
}
