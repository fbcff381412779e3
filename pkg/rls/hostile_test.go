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
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// recordingStore records the buckets of each call and admits everything.
type recordingStore struct {
	calls   atomic.Int64
	buckets [][]leaky.Bucket
}

func (s *recordingStore) Apply(_ context.Context, _ time.Time, buckets []leaky.Bucket, results []leaky.Result) error {
	s.calls.Add(1)
	s.buckets = append(s.buckets, append([]leaky.Bucket(nil), buckets...))
	for i := range buckets {
		results[i] = leaky.Result{Admitted: true, Remaining: 1}
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

// hungStore never answers: it waits for the call's context, as a Redis
// that is stopped (not down) makes a call wait.
type hungStore struct{ deadline atomic.Pointer[time.Time] }

func (s *hungStore) Apply(ctx context.Context, _ time.Time, _ []leaky.Bucket, _ []leaky.Result) error {
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

	// Too little time left to ask the store at all: the failure mode
	// answers without asking.
	store := &recordingStore{}
	svc, _ := newService(t, Options{Store: store, FailureMode: FailAllow, StoreTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Microsecond)
	defer cancel()
	resp, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a")))
	if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || store.calls.Load() != 0 {
		t.Errorf("with 0.5 ms left: %v %v, store asked %d times; want OK without asking", resp.GetOverallCode(), err, store.calls.Load())
	}
}

func TestStoreBudget(t *testing.T) {
	for _, c := range []struct {
		left, timeout, want time.Duration
	}{
		{20 * time.Millisecond, 100 * time.Millisecond, 15 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, 100 * time.Millisecond},
		{2 * time.Millisecond, 100 * time.Millisecond, time.Millisecond},
		{time.Millisecond, 100 * time.Millisecond, 0},
		{100 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), c.left)
		got := storeBudget(ctx, c.timeout)
		cancel()
		// The clock moves between setting and reading the deadline.
		if got > c.want || got < c.want-time.Millisecond {
			t.Errorf("%v left, timeout %v: budget %v, want %v", c.left, c.timeout, got, c.want)
		}
	}
	if got := storeBudget(context.Background(), time.Second); got != time.Second {
		t.Errorf("no deadline: %v, want the timeout", got)
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
// within a third of what an entry really costs on the heap.
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
	if counted < measured*2/3 || counted > measured*4/3 {
		t.Errorf("an entry costs %.0f bytes, the cache counts %.0f: adjust cacheEntryOverhead", measured, counted)
	}
	runtime.KeepAlive(c)
}

// BenchmarkHostileRequest: a request at every cap, all its descriptors
// reaching distinct buckets.
func BenchmarkHostileRequest(b *testing.B) {
	svc, _ := newService(b, Options{Store: &recordingStore{}})
	req := request("api")
	for i := range DefaultMaxDescriptors {
		d := desc(fmt.Sprintf("user=u%d", i), "action=trade")
		for len(d.Entries) < DefaultMaxEntries {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: strings.Repeat("v", 64)})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzShouldRateLimit: any bytes, read as a request, are answered with
// one status per descriptor or refused as InvalidArgument; never a panic.
func FuzzShouldRateLimit(f *testing.F) {
	for _, req := range []*rlsv3.RateLimitRequest{
		request("api", desc("user=a", "action=trade")),
		request("api", desc("client=abuser"), withHits(desc("user=b"), 3, true)),
		request("api", withLimit(desc("user=c"), 5, 1)),
		request("api", descs(DefaultMaxDescriptors+1, "user=a")...),
		request("", desc("user=a")),
		request("api", desc("=x")),
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	store := &recordingStore{}
	svc, _ := newService(f, Options{Store: store})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		store.buckets = nil
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		switch {
		case err != nil && status.Code(err) != codes.InvalidArgument:
			t.Fatalf("%v: %v", &req, err)
		case err == nil && len(resp.GetStatuses()) != len(req.GetDescriptors()):
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
	})
}
