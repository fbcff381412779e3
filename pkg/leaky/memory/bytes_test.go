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

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

var slow = leaky.Limit{Size: 10, DripRate: time.Hour, DripSize: 1} // buckets that stay

// fill charges one bucket for each of n keys made by key(i).
func fill(t testing.TB, s *Store, n int, key func(i int) string) {
	t.Helper()
	r := make([]leaky.Result, 1)
	for i := range n {
		if err := s.Apply(context.Background(), t0, []leaky.Bucket{{Key: key(i), Limit: slow, Hits: 1}}, r); err != nil {
			t.Fatal(err)
		}
		if !r[0].Admitted {
			t.Fatalf("key %d not admitted", i)
		}
	}
}

func longKey(i int) string { return fmt.Sprintf("api|user=%01014d", i) } // 1 KB

// TestMaxBytes: keys of 1 KB fill the store up to its byte bound, never
// past it, and the buckets it keeps still decide exactly.
func TestMaxBytes(t *testing.T) {
	const bound = 8 << 20
	s := newStore(t, Options{MaxBytes: bound, SweepInterval: -1})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill(t, s, 100_000, longKey) // 100 MB of keys
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Bytes(); got > bound || got < bound*3/4 {
		t.Errorf("Bytes %d: want at most %d, and most of it used", got, bound)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > bound*5/4 {
		t.Errorf("the heap grew %d bytes for a bound of %d", grew, bound)
	}
	if s.Evictions() < 90_000 {
		t.Errorf("%d evictions: the bound was not enforced by evicting", s.Evictions())
	}
	// The newest bucket is kept and decides exactly: 9 more fit in 10.
	last := longKey(99_999)
	for i := range 10 {
		r := charge(t, s, t0, last, slow)
		if r.Admitted != (i < 9) {
			t.Fatalf("charge %d of the newest bucket: admitted %v", i+2, r.Admitted)
		}
	}
	// Buckets that drain leave, and their bytes with them.
	s.Sweep(t0.Add(100 * time.Hour))
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Errorf("after all expired: %d buckets, %d bytes", s.Len(), s.Bytes())
	}
}

// TestKeyLargerThanAShard: a key larger than a shard's share of the bytes
// is decided but not kept.
func TestKeyLargerThanAShard(t *testing.T) {
	s := newStore(t, Options{MaxBytes: 64 << 10, Shards: 4})
	huge := strings.Repeat("k", 32<<10)
	if r := charge(t, s, t0, huge, slow); !r.Admitted {
		t.Fatal("not admitted")
	}
	if s.Len() != 0 || s.Bytes() != 0 || s.Evictions() != 1 {
		t.Errorf("%d buckets, %d bytes, %d evictions; want it not kept, counted as evicted", s.Len(), s.Bytes(), s.Evictions())
	}
}

// TestBucketOverhead keeps BucketOverhead honest: the bytes a store
// counts must be within a third of the heap its buckets take, for short
// and for long keys.
func TestBucketOverhead(t *testing.T) {
	for _, c := range []struct {
		name string
		key  func(int) string
	}{
		{"16-byte keys", func(i int) string { return fmt.Sprintf("api|user=%07d", i) }},
		{"1 KB keys", longKey},
	} {
		const n = 100_000
		s := newStore(t, Options{MaxBuckets: 2 * n, MaxBytes: 1 << 40, SweepInterval: -1})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		fill(t, s, n, c.key)
		runtime.GC()
		runtime.ReadMemStats(&after)
		measured := float64(after.HeapAlloc-before.HeapAlloc) / n
		counted := float64(s.Bytes()) / n
		t.Logf("%s: %.0f bytes a bucket measured, %.0f counted", c.name, measured, counted)
		if counted < measured*2/3 || counted > measured*4/3 {
			t.Errorf("%s: a bucket takes %.0f bytes, the store counts %.0f: adjust BucketOverhead", c.name, measured, counted)
		}
		runtime.KeepAlive(s)
	}
}

// TestMemoryBoundRSS fills a store at the default bounds and reports the
// heap and the process's RSS at the bound, for the README. It measures,
// it checks nothing: run it with RLS_MEASURE set to "all", or to a part of
// one case's name ("1 KB") to measure that case alone in a fresh process.
// Run it with the service's GC settings (GOGC=400 GOMEMLIMIT=768MiB) to
// see what the service would hold.
func TestMemoryBoundRSS(t *testing.T) {
	if os.Getenv("RLS_MEASURE") == "" {
		t.Skip("a measurement: set RLS_MEASURE=1 to run it")
	}
	for _, c := range []struct {
		name string
		n    int
		key  func(int) string
	}{
		{"40-byte keys", 2_000_000, func(i int) string { return fmt.Sprintf("api|user=%015d|action=trade", i) }},
		{"1 KB keys", 1_000_000, longKey},
	} {
		if os.Getenv("RLS_MEASURE") != "all" && !strings.Contains(c.name, os.Getenv("RLS_MEASURE")) {
			continue
		}
		s, err := New(Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		fill(t, s, c.n, c.key)
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak := rss()
		debug.FreeOSMemory()
		t.Logf("%s, %d charged: %d buckets kept, %d MiB counted, heap %d MiB, RSS %s (%s once free memory is returned), %d evictions",
			c.name, c.n, s.Len(), s.Bytes()>>20, m.HeapAlloc>>20, peak, rss(), s.Evictions())
		s.Close()
	}
}

// rss returns the process's resident set size from /proc.
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return fmt.Sprintf("%d MiB", kb>>10)
		}
	}
	return "unknown"
}
