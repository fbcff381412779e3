package redis

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BenchmarkApply decides two-level requests over 10000 users on a real
// Redis, concurrently: each call on its own, batched into pipelines, and
// batched into script calls of several requests as the service runs. It
// reports the CPU the benchmark's process spends per request (service-µs),
// which leaves out Redis's own.
func BenchmarkApply(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name     string
		pipeline Pipeline
		batch    int
	}{{"Unbatched", Pipeline{}, 0}, {"Pipelined", DefaultPipeline, 0}, {"Batched", DefaultPipeline, DefaultBatch}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(Options{Pipeline: bc.pipeline, Batch: bc.batch, Prefix: "bench-" + bc.name + ":", Connect: &ClientOptions{URL: srv.URL()}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l := limit.Limit{Size: 1 << 30, DripRate: time.Minute, DripSize: 1}
			const users = 10000
			requests := make([][]limit.Bucket, users)
			for i := range requests {
				user := fmt.Sprintf("api|user=u%d", i)
				requests[i] = []limit.Bucket{{Key: user, Limit: l, Hits: 1}, {Key: user + "|action=a1", Limit: l, Hits: 1}}
			}
			b.SetParallelism(32) // requests waiting on Redis at once, as in a busy service
			b.ReportAllocs()
			cpu := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				results := make([]limit.Result, 2)
				i := 0
				for pb.Next() {
					i = (i + 7919) % users
					if err := s.Apply(context.Background(), time.Now(), requests[i], results); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "service-µs/op")
		})
	}
}

// processCPU returns the CPU time the process has spent, user and system.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkScriptCall measures the service's own work on a script call of
// 32 two-level requests, without Redis: the Redis keys, the arguments, and
// reading a reply into the results (limit.DecideAll on the states read).
func BenchmarkScriptCall(b *testing.B) {
	l := limit.Limit{Size: 1 << 30, DripRate: time.Minute, DripSize: 1}
	const batch = 32
	now := int64(1_760_000_000_000_000)
	reqs := make([]scriptRequest, batch)
	var reply []int64
	for r := range reqs {
		user := fmt.Sprintf("api|user=u%d", r)
		reqs[r] = scriptRequest{at: -1, results: make([]limit.Result, 2),
			buckets: []limit.Bucket{{Key: user, Limit: l, Hits: 1}, {Key: user + "|action=a1", Limit: l, Hits: 1}}}
		reply = append(reply, 1, 7, now-1500, 3, now-900)
	}
	reply = append(reply, now)
	b.ReportAllocs()
	for b.Loop() {
		keys := make([]string, 0, 2*batch) // as the batcher gathers them
		for _, r := range reqs {
			keys = append(keys, bucketKeys(DefaultPrefix, r.buckets)...)
		}
		decideArgs(-1, keys, reqs)
		if _, err := decideReply(reply, reqs, len(keys)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/req")
}
