package rls

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// recordingStore records the buckets of each call and admits everything.
type recordingStore struct {
	calls   atomic.Int64
	buckets [][]limit.Bucket
}

func (s *recordingStore) Apply(_ context.Context, _ time.Time, buckets []limit.Bucket, results []limit.Result) error {
	s.calls.Add(1)
	s.buckets = append(s.buckets, append([]limit.Bucket(nil), buckets...))
	for i := range buckets {
		results[i] = limit.Result{Admitted: true, Remaining: 1}
	}
	return nil
}

func descs(n int, pairs ...string) []*ratelimitv3.RateLimitDescriptor {
	out := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range out {
		out[i] = desc(pairs...)
	}
	return out
}

func TestRequestCaps(t *testing.T) {
	long := strings.Repeat("x", DefaultMaxEntryBytes+1)
	manyEntries := desc()
	for range DefaultMaxEntries + 1 {
		manyEntries.Entries = append(manyEntries.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "user", Value: "a"})
	}
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"descriptors", request("api", descs(DefaultMaxDescriptors+1, "user=a")...), "request has 65 descriptors: at most 64 allowed (-max-descriptors)"},
		{"entries", request("api", desc("user=a"), manyEntries), "descriptors[1] has 33 entries: at most 32 allowed (-max-entries)"},
		{"key", request("api", desc("user=a", long+"=v")), "descriptors[0].entries[1].key is 4097 bytes: at most 4096 allowed (-max-entry-bytes)"},
		{"value", request("api", desc("user="+long)), "descriptors[0].entries[0].value is 4097 bytes: at most 4096 allowed (-max-entry-bytes)"},
		{"domain", request(long, desc("user=a")), "domain is 4097 bytes: at most 4096 allowed (-max-entry-bytes)"},
	} {
		store := &recordingStore{}
		svc, _ := newService(t, Options{Store: store})
		_, err := svc.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != c.want {
			t.Errorf("%s: %v, want InvalidArgument %q", c.name, err, c.want)
		}
		if store.calls.Load() != 0 {
			t.Errorf("%s: the store was asked", c.name)
		}
	}

	// At the caps exactly, a request passes.
	store := &recordingStore{}
	svc, _ := newService(t, Options{Store: store})
	atCaps := request(strings.Repeat("d", DefaultMaxEntryBytes), descs(DefaultMaxDescriptors, "user="+long[1:])...)
	atCaps.Descriptors[0] = manyEntries
	atCaps.Descriptors[0].Entries = atCaps.Descriptors[0].Entries[:DefaultMaxEntries]
	if _, err := svc.ShouldRateLimit(context.Background(), atCaps); err != nil {
		t.Errorf("a request at the caps: %v", err)
	}

	// Caps of one's own.
	svc, _ = newService(t, Options{Store: store, MaxDescriptors: 2, MaxEntries: 1, MaxEntryBytes: 4})
	for req, want := range map[*rlsv3.RateLimitRequest]string{
		request("api", descs(3, "user=a")...):    "at most 2 allowed (-max-descriptors)",
		request("api", desc("user=a", "b=c")):    "at most 1 allowed (-max-entries)",
		request("api", desc("user=abcde")):       "at most 4 allowed (-max-entry-bytes)",
		request("api", descs(2, "user=abcd")...): "",
	} {
		_, err := svc.ShouldRateLimit(context.Background(), req)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("own caps: %v, want %q", err, want)
		}
	}
	if _, err := New(Options{Store: store, MaxEntries: -1}); err == nil {
		t.Error("a negative cap was accepted")
	}
}

// TestBucketsMergedExactly: however many descriptors reach a bucket, the
// store sees it once, with all their hits; past the few buckets searched
// one by one, the merge goes through a map and must stay exact.
func TestBucketsMergedExactly(t *testing.T) {
	for _, users := range []int{1, scanBuckets / 2, scanBuckets, scanBuckets + 1, DefaultMaxDescriptors} {
		store := &recordingStore{}
		svc, _ := newService(t, Options{Store: store})
		req := request("api")
		for i := range DefaultMaxDescriptors {
			req.Descriptors = append(req.Descriptors, desc(fmt.Sprintf("user=u%d", i%users), "action=trade"))
		}
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := store.buckets[0]
		if len(got) != 2*users {
			t.Fatalf("%d users: %d buckets, want %d", users, len(got), 2*users)
		}
		var hits int64
		keys := map[string]bool{}
		for _, b := range got {
			hits += b.Hits
			keys[b.Key] = true
		}
		if len(keys) != len(got) || hits != 2*DefaultMaxDescriptors {
			t.Errorf("%d users: %d distinct keys of %d, %d hits; want all distinct and %d hits", users, len(keys), len(got), hits, 2*DefaultMaxDescriptors)
		}
	}
}

// chainConfig is a domain of one branch k0 → k1 → … of depth nodes, each
// with a limit: a descriptor of depth entries reaches depth buckets.
func chainConfig(depth int) string {
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	indent := ""
	for i := range depth {
		fmt.Fprintf(&b, "%s  - key: k%d\n%s    leaky_bucket: {size: 1000000, drip_rate: 1us}\n", indent, i, indent)
		if i < depth-1 {
			fmt.Fprintf(&b, "%s    descriptors:\n", indent)
		}
		indent += "    "
	}
	return b.String()
}

// hostileRequest is a request at the descriptor and entry caps whose
// descriptor i starts with k0=u(i mod users): 64 × 32 = 2048 levels on
// chainConfig(32), merged into users × 32 distinct buckets.
func hostileRequest(users int) *rlsv3.RateLimitRequest {
	req := request("api")
	for i := range DefaultMaxDescriptors {
		d := desc(fmt.Sprintf("k0=u%d", i%users))
		for k := 1; k < DefaultMaxEntries; k++ {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: fmt.Sprintf("k%d", k), Value: strings.Repeat("v", 64)})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestHostileRequestMergedExactly: the largest request the caps allow
// reaches 2048 levels; however they share buckets, the store gets each
// bucket once with the hits of every level on it.
func TestHostileRequestMergedExactly(t *testing.T) {
	cfg := loadConfig(t, chainConfig(DefaultMaxEntries))
	for _, users := range []int{DefaultMaxDescriptors, DefaultMaxDescriptors / 2, 4, 1} {
		store := &recordingStore{}
		svc, _ := newService(t, Options{Store: store, Config: cfg})
		resp, err := svc.ShouldRateLimit(context.Background(), hostileRequest(users))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetStatuses()) != DefaultMaxDescriptors {
			t.Fatalf("%d statuses", len(resp.GetStatuses()))
		}
		got := store.buckets[0]
		hits := map[string]int64{}
		for _, b := range got {
			hits[b.Key] += b.Hits
		}
		want := int64(DefaultMaxDescriptors / users) // descriptors per user; 64 divides evenly for these
		if len(got) != users*DefaultMaxEntries || len(hits) != len(got) {
			t.Errorf("%d users: %d buckets, %d distinct; want %d, all distinct", users, len(got), len(hits), users*DefaultMaxEntries)
		}
		for k, h := range hits {
			if h != want {
				t.Errorf("%d users: bucket %.40q… has %d hits, want %d", users, k, h, want)
				break
			}
		}
	}
}

// TestBucketCap: the cap on a request's buckets cannot be reached within
// the other caps (TestLevelsPerDescriptor), so it is lowered here to see
// that it refuses, and that nothing is charged.
func TestBucketCap(t *testing.T) {
	store := &recordingStore{}
	svc, _ := newService(t, Options{Store: store, Config: loadConfig(t, chainConfig(3))})
	if got, want := svc.caps.buckets, DefaultMaxDescriptors*DefaultMaxEntries; got != want {
		t.Errorf("default bucket cap %d, want %d", got, want)
	}
	svc.caps.buckets = 5
	_, err := svc.ShouldRateLimit(context.Background(), request("api", desc("k0=a", "k1=b", "k2=c"), desc("k0=d", "k1=e", "k2=f")))
	want := "request reaches 6 buckets: at most 5 allowed (-max-descriptors × -max-entries)"
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("6 buckets over a cap of 5: %v, want InvalidArgument %q", err, want)
	}
	if store.calls.Load() != 0 {
		t.Error("the store was asked")
	}
	if _, err := svc.ShouldRateLimit(context.Background(), request("api", desc("k0=a", "k1=b", "k2=c"), desc("k0=a", "k1=b"))); err != nil {
		t.Errorf("3 buckets (5 levels merged) under a cap of 5: %v", err)
	}
}

// TestLevelsPerDescriptor backs the bucket cap: a descriptor resolves to
// at most one level per entry, in every matching mode, with or without
// a limit sent by Envoy, whatever its entries match.
func TestLevelsPerDescriptor(t *testing.T) {
	const tree = `
descriptors:
  - key: a
    leaky_bucket: {size: 1, drip_rate: 1s}
    descriptors:
      - key: b
        value: x
        leaky_bucket: {size: 1, drip_rate: 1s}
        descriptors:
          - key: c
            leaky_bucket: {size: 1, drip_rate: 1s}
      - key: b
        value: x*
        leaky_bucket: {size: 1, drip_rate: 1s}
      - key: b
        descriptors:
          - key: c
            leaky_bucket: {size: 1, drip_rate: 1s}
  - key: c
`
	override := &descriptors.Rule{Limit: limit.Limit{Size: 1, DripRate: time.Second, DripSize: 1}}
	keys, values := []string{"a", "b", "c", "d"}, []string{"", "x", "xy", "z"}
	checked := 0
	for _, match := range []string{"all", "leaf"} {
		d := loadConfig(t, "domain: api\nmatch: "+match+tree).Domain("api")
		// Every descriptor of 1 to 4 entries over these keys and values.
		var walk func(entries []descriptors.Entry)
		walk = func(entries []descriptors.Entry) {
			if len(entries) > 0 {
				for _, o := range []*descriptors.Rule{nil, override} {
					levels := d.Resolve(entries, o, nil)
					if len(levels) > len(entries) {
						t.Fatalf("match %s, %v, override %v: %d levels for %d entries", match, entries, o != nil, len(levels), len(entries))
					}
					checked++
				}
			}
			if len(entries) == 4 {
				return
			}
			for _, k := range keys {
				for _, v := range values {
					walk(append(entries, descriptors.Entry{Key: k, Value: v}))
				}
			}
		}
		walk(nil)
	}
	if checked < 100_000 {
		t.Errorf("only %d descriptors checked", checked)
	}
}

// hungStore never answers: it waits for the call's context, as a Redis
// that is stopped (not down) makes a call wait.
type hungStore struct{ deadline atomic.Pointer[time.Time] }

func (s *hungStore) Apply(ctx context.Context, _ time.Time, _ []limit.Bucket, _ []limit.Result) error {
	if dl, ok := ctx.Deadline(); ok {
		s.deadline.Store(&dl)
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestFailureModeAnswersBeforeTheDeadline: with a hung store, the store
// call ends a margin before the caller's deadline, so the failure mode
// answers in time instead of the call running out.
func TestFailureModeAnswersBeforeTheDeadline(t *testing.T) {
	for _, c := range []struct {
		mode     FailureMode
		wantCode codes.Code
		want     rlsv3.RateLimitResponse_Code
	}{
		{FailAllow, codes.OK, rlsv3.RateLimitResponse_OK},
		{FailDeny, codes.OK, rlsv3.RateLimitResponse_OVER_LIMIT},
		{FailUnavailable, codes.Unavailable, rlsv3.RateLimitResponse_UNKNOWN},
	} {
		store := &hungStore{}
		svc, _ := newService(t, Options{Store: store, FailureMode: c.mode, StoreTimeout: 100 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		callDeadline, _ := ctx.Deadline()
		resp, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a")))
		answered := time.Now()
		cancel()
		if status.Code(err) != c.wantCode || resp.GetOverallCode() != c.want {
			t.Errorf("%v: %v %v, want %v %v", c.mode, resp.GetOverallCode(), err, c.want, c.wantCode)
		}
		if !answered.Before(callDeadline) {
			t.Errorf("%v: answered %v after the deadline", c.mode, answered.Sub(callDeadline))
		}
		if dl := store.deadline.Load(); dl == nil || callDeadline.Sub(*dl) < time.Millisecond {
			t.Errorf("%v: the store's deadline is not a margin before the call's (%v)", c.mode, dl)
		}
	}

	// A margin of one's own: the store's deadline is that much before the
	// call's.
	store := &hungStore{}
	svc, _ := newService(t, Options{Store: store, FailureMode: FailAllow, StoreTimeout: 100 * time.Millisecond, DeadlineMargin: 8 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	callDeadline, _ := ctx.Deadline()
	resp, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a")))
	cancel()
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("margin 8 ms: %v %v, want OK", resp.GetOverallCode(), err)
	}
	// The clock moves between reading the time left and setting the
	// store's deadline, which may so end a little under the margin early.
	if dl := store.deadline.Load(); dl == nil {
		t.Error("margin 8 ms: the store was given no deadline")
	} else if early := callDeadline.Sub(*dl); early < 7*time.Millisecond || early > 9*time.Millisecond {
		t.Errorf("margin 8 ms: the store's deadline is %v before the call's, want 8 ms", early)
	}

	// Too little time left to ask the store at all: the failure mode
	// answers without asking.
	for _, c := range []struct {
		mode FailureMode
		want string
	}{
		{FailAllow, "OK <nil>"},
		{FailUnavailable, "UNKNOWN rpc error: code = Unavailable desc = rate-limit store unavailable: too little of the call's deadline left to ask it"},
	} {
		store := &recordingStore{}
		svc, _ := newService(t, Options{Store: store, FailureMode: c.mode, StoreTimeout: 100 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 900*time.Microsecond)
		resp, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a")))
		cancel()
		if got := fmt.Sprint(resp.GetOverallCode(), " ", err); got != c.want || store.calls.Load() != 0 {
			t.Errorf("%v with 0.9 ms left: %s, store asked %d times; want %s without asking", c.mode, got, store.calls.Load(), c.want)
		}
	}
}

func TestStoreBudget(t *testing.T) {
	for _, c := range []struct {
		left, timeout, margin, want time.Duration
	}{
		{20 * time.Millisecond, 100 * time.Millisecond, 0, 15 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, 0, 100 * time.Millisecond},
		{2 * time.Millisecond, 100 * time.Millisecond, 0, time.Millisecond},
		{time.Millisecond, 100 * time.Millisecond, 0, 0},
		{100 * time.Millisecond, 50 * time.Millisecond, 0, 50 * time.Millisecond},
		{100 * time.Millisecond, 200 * time.Millisecond, 0, 90 * time.Millisecond}, // the margin's 10 ms ceiling
		{20 * time.Millisecond, 100 * time.Millisecond, 2 * time.Millisecond, 18 * time.Millisecond},
		{20 * time.Millisecond, 10 * time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond},
		{20 * time.Millisecond, 100 * time.Millisecond, 30 * time.Millisecond, -10 * time.Millisecond},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), c.left)
		got := storeBudget(ctx, c.timeout, c.margin)
		cancel()
		// The clock moves between setting and reading the deadline.
		if got > c.want || got < c.want-time.Millisecond {
			t.Errorf("%v left, timeout %v, margin %v: budget %v, want %v", c.left, c.timeout, c.margin, got, c.want)
		}
	}
	if got := storeBudget(context.Background(), time.Second, 0); got != time.Second {
		t.Errorf("no deadline: %v, want the timeout", got)
	}
	if _, err := New(Options{Store: &recordingStore{}, DeadlineMargin: -time.Millisecond}); err == nil {
		t.Error("a negative deadline margin was accepted")
	}
}

func TestOverLimitCacheBytes(t *testing.T) {
	const bound = 64 << 10
	c := newOverLimitCache(1_000_000, bound)
	now := time.Now()
	for i := range 10_000 {
		c.put(fmt.Sprintf("%01000d", i), cacheEntry{hits: 1, reset: now.Add(time.Hour)})
		if got := c.bytes(); got > bound {
			t.Fatalf("after %d puts: %d bytes, over the bound of %d", i+1, got, bound)
		}
	}
	if got := c.bytes(); got < bound/2 {
		t.Errorf("%d bytes held: the cache should fill most of its %d", got, bound)
	}
	// Entries go and their bytes with them.
	for i := range 10_000 {
		c.remove(fmt.Sprintf("%01000d", i))
	}
	if got := c.bytes(); got != 0 {
		t.Errorf("all removed: %d bytes still counted", got)
	}
	// A key larger than a shard's budget is not kept.
	c.put(strings.Repeat("k", bound), cacheEntry{hits: 1, reset: now.Add(time.Hour)})
	if got := c.bytes(); got != 0 {
		t.Errorf("a key over the budget: %d bytes held", got)
	}
}

// TestCacheEntryOverhead keeps cacheEntryOverhead honest: it must be
// within 30% of what an entry really costs on the heap.
func TestCacheEntryOverhead(t *testing.T) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("api|user=%07d", i) // 16 bytes
	}
	c := newOverLimitCache(n*2, 0)
	now := time.Now()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, k := range keys {
		c.put(k, cacheEntry{hits: 1, reset: now.Add(time.Hour)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	measured := float64(after.HeapAlloc-before.HeapAlloc) / n
	counted := float64(c.bytes()) / n
	t.Logf("an entry with a 16-byte key: %.0f bytes measured, %.0f counted", measured, counted)
	if counted < measured*0.7 || counted > measured*1.3 {
		t.Errorf("an entry costs %.0f bytes, the cache counts %.0f: adjust cacheEntryOverhead", measured, counted)
	}
	runtime.KeepAlive(c)
}

// TestCacheHotPathAllocates checks that a lookup, and a put for a bucket
// the cache holds, allocate nothing: they run for every over-limit call.
func TestCacheHotPathAllocates(t *testing.T) {
	c := newOverLimitCache(1000, 1<<20)
	now := time.Now()
	e := cacheEntry{hits: 1, reset: now.Add(time.Hour)}
	c.put("api|user=a", e)
	if n := testing.AllocsPerRun(100, func() {
		c.get("api|user=a", 1, now)
		c.get("api|user=b", 1, now)
		c.put("api|user=a", e)
	}); n != 0 {
		t.Errorf("get and put of a held key: %v allocations", n)
	}
}

// admitStore admits everything and records nothing.
type admitStore struct{}

func (admitStore) Apply(_ context.Context, _ time.Time, buckets []limit.Bucket, results []limit.Result) error {
	for i := range buckets {
		results[i] = limit.Result{Admitted: true, Remaining: 1}
	}
	return nil
}

// BenchmarkHostileRequest: the largest request the caps allow, 64
// descriptors of 32 entries, each reaching 32 levels: 2048 distinct
// buckets (TestHostileRequestMergedExactly counts them), merged through
// the map. The store admits without work, so this is the service's own
// cost.
func BenchmarkHostileRequest(b *testing.B) {
	svc, _ := newService(b, Options{Store: admitStore{}, Config: loadConfig(b, chainConfig(DefaultMaxEntries))})
	req := hostileRequest(DefaultMaxDescriptors)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
