package memory

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BenchmarkApply decides a two-level request (user and user/action) over
// 10,000 users from parallel goroutines.
func BenchmarkApply(b *testing.B) {
	s, err := New(Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := limit.Limit{Size: 1 << 30, DripRate: time.Microsecond, DripSize: 1}
	reqs := make([][]limit.Bucket, 10000)
	for i := range reqs {
		user := fmt.Sprintf("api|user=u%d", i)
		reqs[i] = []limit.Bucket{{Key: user, Limit: l, Hits: 1}, {Key: user + "|action=trade", Limit: l, Hits: 1}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		results := make([]limit.Result, 2)
		i := 0
		for pb.Next() {
			if err := s.Apply(ctx, time.Now(), reqs[i%len(reqs)], results); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkMemoryPerBucket reports the heap a bucket costs, key included,
// for keys like api|user=u123456|action=trade.
func BenchmarkMemoryPerBucket(b *testing.B) {
	const n = 200_000
	l := limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("api|user=u%06d|action=trade", i)
	}
	results := make([]limit.Result, 1)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := New(Options{MaxBuckets: 2 * n, SweepInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			s.Apply(context.Background(), t0, []limit.Bucket{{Key: k, Limit: l, Hits: 1}}, results)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("%d buckets, want %d", s.Len(), n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/bucket")
		s.Close()
	}
}

// BenchmarkApplyEvicting decides requests for new 1 KB keys in a store full
// to its byte bound, as in a flood of distinct descriptor values: each
// evicts to make room (one allocation, the key's copy).
func BenchmarkApplyEvicting(b *testing.B) {
	s, err := New(Options{MaxBytes: 8 << 20, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// Ten times what the store holds: a key is evicted before it comes back.
	keys := make([]string, 80_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("api|user=%01015d", i)
	}
	results := make([]limit.Result, 1)
	req := []limit.Bucket{{Limit: limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}, Hits: 1}}
	for i := range keys {
		req[0].Key = keys[i]
		s.Apply(context.Background(), t0, req, results)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req[0].Key = keys[i%len(keys)]
		if err := s.Apply(context.Background(), t0, req, results); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if s.Bytes() > 8<<20 {
		b.Fatalf("Bytes %d over the bound", s.Bytes())
	}
}
