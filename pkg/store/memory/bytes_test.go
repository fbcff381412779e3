package memory

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

var slow = limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1} // buckets that stay

// keysOf returns a key maker for keys of exactly n bytes (n at least 16),
// like api|user=000042.
func keysOf(n int) func(i int) string {
	return func(i int) string { return fmt.Sprintf("api|user=%0*d", n-9, i) }
}

// fill charges one bucket for each of n keys made by key(i).
func fill(t testing.TB, s *Store, n int, key func(i int) string) {
	t.Helper()
	r := make([]limit.Result, 1)
	for i := range n {
		if err := s.Apply(context.Background(), t0, []limit.Bucket{{Key: key(i), Limit: slow, Hits: 1}}, r); err != nil {
			t.Fatal(err)
		}
		if !r[0].Admitted {
			t.Fatalf("key %d not admitted", i)
		}
	}
}

// heapAlloc returns the live heap, after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestMaxBytes: 1 KB keys fill the store up to its byte bound, never past
// it, the heap grows by about the bound, and the buckets it keeps still
// decide exactly.
func TestMaxBytes(t *testing.T) {
	const bound = 8 << 20
	s := newStore(t, Options{MaxBytes: bound, SweepInterval: -1})
	before := heapAlloc()
	long := keysOf(1024)
	for i := range 100 { // 100,000 keys, 100 MB, checked as they come
		fill(t, s, 1000, func(j int) string { return long(i*1000 + j) })
		if got := s.Bytes(); got > bound {
			t.Fatalf("after %d keys: Bytes %d, over the bound %d", (i+1)*1000, got, bound)
		}
	}
	grew := heapAlloc() - before
	t.Logf("%d buckets kept, %d bytes counted, heap grew %d for a bound of %d", s.Len(), s.Bytes(), grew, bound)
	if got := s.Bytes(); got < bound*3/4 {
		t.Errorf("Bytes %d: most of the bound %d should be used", got, bound)
	}
	if grew > bound*5/4 {
		t.Errorf("the heap grew %d bytes for a bound of %d", grew, bound)
	}
	if s.Evictions() < 90_000 {
		t.Errorf("%d evictions: the bound was not enforced by evicting", s.Evictions())
	}
	// The newest bucket is kept and decides exactly: 9 more fit in 10.
	last := long(99_999)
	for i := range 10 {
		r := charge(t, s, t0, last, slow)
		if r.Admitted != (i < 9) {
			t.Fatalf("charge %d of the newest bucket: admitted %v", i+2, r.Admitted)
		}
	}
	// A request of new buckets in the full store evicts others, never its
	// own: all four decide exactly, 10 requests admitted, the 11th not.
	req := make([]limit.Bucket, 4)
	for i := range req {
		req[i] = limit.Bucket{Key: long(200_000 + i), Limit: slow, Hits: 1}
	}
	r := make([]limit.Result, len(req))
	for i := range 11 {
		if err := s.Apply(context.Background(), t0, req, r); err != nil {
			t.Fatal(err)
		}
		for j := range r {
			if r[j].Admitted != (i < 10) || (i < 10 && r[j].Remaining != int64(9-i)) {
				t.Fatalf("request %d, bucket %d: %+v", i+1, j, r[j])
			}
		}
	}
	if got := s.Bytes(); got > bound {
		t.Fatalf("Bytes %d, over the bound %d", got, bound)
	}
	// Buckets that drain leave, and their bytes with them.
	s.Sweep(t0.Add(100 * time.Hour))
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Errorf("after all expired: %d buckets, %d bytes", s.Len(), s.Bytes())
	}
}

// TestBytesFollowBuckets: every way a bucket leaves (drained by a request,
// swept, evicted) takes its bytes with it.
func TestBytesFollowBuckets(t *testing.T) {
	s := newStore(t, Options{MaxBuckets: 2, Shards: 1, SweepInterval: -1})
	l := limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	charge(t, s, t0, "abc", l)
	charge(t, s, t0, "abcdef", l)
	if got, want := s.Bytes(), int64(3+6+2*BucketOverhead); got != want {
		t.Fatalf("two buckets: Bytes %d, want %d", got, want)
	}
	charge(t, s, t0, "abcdefgh", l) // evicts one of the two
	if s.Len() != 2 || s.Evictions() != 1 {
		t.Fatalf("%d buckets, %d evictions: want 2 and 1", s.Len(), s.Evictions())
	}
	if b := s.Bytes(); b != 3+8+2*BucketOverhead && b != 6+8+2*BucketOverhead {
		t.Fatalf("after an eviction: Bytes %d", b)
	}
	// A refund empties "abcdefgh": it is deleted.
	r := make([]limit.Result, 1)
	if err := s.Apply(context.Background(), t0, []limit.Bucket{{Key: "abcdefgh", Limit: l, Hits: -1}}, r); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 || s.Bytes() != int64(len(onlyKey(s)))+BucketOverhead {
		t.Fatalf("after a refund to empty: %d buckets, %d bytes", s.Len(), s.Bytes())
	}
	s.Sweep(t0.Add(time.Hour))
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("after a sweep: %d buckets, %d bytes", s.Len(), s.Bytes())
	}
}

// onlyKey returns the key of a store holding one bucket.
func onlyKey(s *Store) string {
	for i := range s.shards {
		for k := range s.shards[i].m {
			return k
		}
	}
	return ""
}

// TestKeyLargerThanAShard: a key larger than a shard's share of the bytes
// is decided but not kept, and counted as evicted.
func TestKeyLargerThanAShard(t *testing.T) {
	s := newStore(t, Options{MaxBytes: 64 << 10, SweepInterval: -1})
	huge := strings.Repeat("k", 128<<10)
	for i := range 3 {
		if r := charge(t, s, t0, huge, slow); !r.Admitted || r.Remaining != 9 {
			t.Fatalf("charge %d: %+v, want admitted as if new", i+1, r)
		}
	}
	if s.Len() != 0 || s.Bytes() != 0 || s.Evictions() != 3 {
		t.Errorf("%d buckets, %d bytes, %d evictions; want it not kept, counted as evicted", s.Len(), s.Bytes(), s.Evictions())
	}
	// A key the same store can hold is kept.
	charge(t, s, t0, huge[:32<<10], slow)
	if s.Len() != 1 {
		t.Errorf("a 32 KiB key in a 64 KiB store: %d buckets kept", s.Len())
	}
}

// TestRequestLargerThanTheStore: when a request's own buckets fill a
// shard, the others are decided but not kept: the store stays within its
// bound and counts them as evicted.
func TestRequestLargerThanTheStore(t *testing.T) {
	s := newStore(t, Options{MaxBuckets: 1, SweepInterval: -1})
	r := make([]limit.Result, 3)
	req := []limit.Bucket{{Key: "a", Limit: slow, Hits: 1}, {Key: "b", Limit: slow, Hits: 1}, {Key: "c", Limit: slow, Hits: 1}}
	if err := s.Apply(context.Background(), t0, req, r); err != nil {
		t.Fatal(err)
	}
	for i := range r {
		if !r[i].Admitted {
			t.Fatalf("bucket %d not admitted", i)
		}
	}
	if s.Len() != 1 || s.Evictions() != 2 {
		t.Errorf("%d buckets, %d evictions: want 1 kept, 2 counted as evicted", s.Len(), s.Evictions())
	}
}

// TestShardsHoldAMiB: small byte bounds take fewer shards, so that each
// shard's share holds any key a request may carry.
func TestShardsHoldAMiB(t *testing.T) {
	for _, c := range []struct {
		maxBytes int64
		shards   int
	}{{0, 64}, {256 << 20, 64}, {8 << 20, 8}, {12 << 20, 8}, {1 << 20, 1}, {1000, 1}} {
		s := newStore(t, Options{MaxBytes: c.maxBytes, SweepInterval: -1})
		if len(s.shards) != c.shards {
			t.Errorf("MaxBytes %d: %d shards, want %d", c.maxBytes, len(s.shards), c.shards)
		}
	}
}

// TestBucketOverhead keeps BucketOverhead honest: the bytes a store counts
// must be within 35% of the heap its buckets take, for short and for long
// keys, in a store filling up and in a full store that evicts.
func TestBucketOverhead(t *testing.T) {
	for _, c := range []struct {
		name    string
		keyLen  int
		opts    Options
		charged int
	}{
		{"16-byte keys, filling", 16, Options{MaxBuckets: 1 << 30, MaxBytes: 1 << 40}, 200_000},
		{"1 KB keys, filling", 1024, Options{MaxBuckets: 1 << 30, MaxBytes: 1 << 40}, 200_000},
		// Evictions leave tombstones in the maps, which split their
		// tables: a full store takes more heap a bucket than a filling one.
		{"16-byte keys, full and evicting", 16, Options{MaxBytes: 8 << 20}, 500_000},
		{"40-byte keys, full and evicting", 40, Options{MaxBytes: 8 << 20}, 500_000},
	} {
		c.opts.SweepInterval = -1
		s := newStore(t, c.opts)
		before := heapAlloc()
		fill(t, s, c.charged, keysOf(c.keyLen))
		grew := heapAlloc() - before
		measured := float64(grew) / float64(s.Len())
		counted := float64(s.Bytes()) / float64(s.Len())
		t.Logf("%s: %d buckets, %.0f bytes a bucket measured, %.0f counted (%+.0f%%)", c.name, s.Len(), measured, counted, 100*(counted/measured-1))
		if counted < measured*0.65 || counted > measured*1.35 {
			t.Errorf("%s: a bucket takes %.0f bytes, the store counts %.0f: adjust BucketOverhead", c.name, measured, counted)
		}
		s.Close()
		runtime.KeepAlive(s)
	}
}

// TestMemoryBoundRSS fills a store at the default bounds and reports the
// heap and the process's RSS at the bound, for docs/hardening.md. It measures,
// it checks nothing: run it with RLS_MEASURE set to "all", or to a part of
// one case's name ("1 KB") to measure that case alone in a fresh process.
// GOGC and GOMEMLIMIT set as the service does show what it would hold.
func TestMemoryBoundRSS(t *testing.T) {
	if os.Getenv("RLS_MEASURE") == "" {
		t.Skip("a measurement: set RLS_MEASURE=all to run it")
	}
	for _, c := range []struct {
		name   string
		n      int
		keyLen int
	}{
		{"40-byte keys", 2_000_000, 40},
		{"1 KB keys", 1_000_000, 1024},
	} {
		if os.Getenv("RLS_MEASURE") != "all" && !strings.Contains(c.name, os.Getenv("RLS_MEASURE")) {
			continue
		}
		s, err := New(Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		fill(t, s, c.n, keysOf(c.keyLen))
		elapsed := time.Since(start)
		heap := heapAlloc()
		rss, hwm := procStatus("VmRSS"), procStatus("VmHWM")
		debug.FreeOSMemory()
		t.Logf("%s, %d charged in %v: %d buckets kept, %d MiB counted, %d evictions; heap %d MiB, RSS %d MiB (peak %d MiB, %d MiB once free memory is returned)",
			c.name, c.n, elapsed.Round(time.Millisecond), s.Len(), s.Bytes()>>20, s.Evictions(), heap>>20, rss>>20, hwm>>20, procStatus("VmRSS")>>20)
		s.Close()
	}
}

// procStatus returns a size from /proc/self/status, in bytes; 0 if unknown.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestWindowBytes keeps WindowOverhead honest: a sliding window counts its
// key, BucketOverhead, WindowOverhead and 8 bytes per sub-window, within
// 35% of the heap it takes; and its bytes leave with it.
func TestWindowBytes(t *testing.T) {
	for _, subs := range []int{10, 60, 1000} {
		l := limit.Limit{Algorithm: limit.SlidingWindow, Size: 100, Window: time.Duration(subs) * time.Minute, Resolution: time.Minute}
		s := newStore(t, Options{MaxBuckets: 1 << 30, MaxBytes: 1 << 40, SweepInterval: -1})
		n := 2_000_000 / subs
		key := keysOf(24)
		before := heapAlloc()
		r := make([]limit.Result, 1)
		for i := range n {
			if err := s.Apply(context.Background(), t0, []limit.Bucket{{Key: key(i), Limit: l, Hits: 1}}, r); err != nil || !r[0].Admitted {
				t.Fatalf("window %d: %v, %+v", i, err, r[0])
			}
		}
		grew := heapAlloc() - before
		measured := float64(grew) / float64(s.Len())
		counted := float64(s.Bytes()) / float64(s.Len())
		t.Logf("%d sub-windows: %d windows, %.0f bytes a window measured, %.0f counted (%+.0f%%)", subs, s.Len(), measured, counted, 100*(counted/measured-1))
		if counted < measured*0.65 || counted > measured*1.35 {
			t.Errorf("%d sub-windows: a window takes %.0f bytes, the store counts %.0f: adjust WindowOverhead", subs, measured, counted)
		}
		// A refund empties a window: it goes, and its bytes with it.
		if err := s.Apply(context.Background(), t0, []limit.Bucket{{Key: key(0), Limit: l, Hits: -1}}, r); err != nil {
			t.Fatal(err)
		}
		if want := int64(n-1) * (24 + BucketOverhead + WindowOverhead + 8*int64(subs)); s.Bytes() != want {
			t.Errorf("after emptying one: %d bytes, want %d", s.Bytes(), want)
		}
		s.Close()
		runtime.KeepAlive(s)
	}
}
