package redis

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

// BenchmarkCallSize measures how long one script call holds Redis
// (Redis's own CPU per call, from INFO cpu) by its weight in buckets
// (callWeight): of leaky buckets only, and of the mix of
// TestHugeRequestLetsOthersIn (leaky buckets, sliding windows of 60
// sub-windows and fixed windows in turn, a sliding window weighing 6), all
// stored. A request's buckets go in calls of at most maxCallBuckets,
// chosen from these figures.
//
// RLS_REQUIRE_REDIS=1 go test ./pkg/store/redis -run XXX -bench CallSize
func BenchmarkCallSize(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	cs := &clients{conn: c}
	for _, mix := range []bool{false, true} {
		for _, weight := range []int{128, 256, 512, 1024} {
			var buckets []limit.Bucket
			for w, all := 0, hugeRequest(weight, 1, ""); w < weight; {
				bk := all[len(buckets)]
				if !mix {
					bk.Limit = all[0].Limit
				}
				bk.Limit.Size = 1 << 40
				buckets = append(buckets, bk)
				w += callWeight(bk.Limit)
			}
			name := fmt.Sprintf("leaky-%d", weight)
			if mix {
				name = fmt.Sprintf("mix-%d", weight)
			}
			keys := bucketKeys(name+":", buckets)
			n := len(buckets)
			results, before := make([]limit.Result, n), make([]limit.State, n)
			leases, index := make([]Lease, n), make([]int, n)
			for i, bk := range buckets {
				leases[i], index[i] = Lease{Key: keys[i], Limit: bk.Limit, Return: 1, At: time.Now().UnixMicro(), Ask: 1}, i
			}
			for _, call := range []struct {
				name string
				run  func() error
			}{
				{"decide", func() error {
					_, err := scriptExec{}.run(ctx, cs, when{at: -1}, keys, buckets, results, before)
					return err
				}},
				{"lease", func() error {
					_, err := runScript(ctx, cs, &leaseScript, keys, leaseArgs(-1, 0, leases, index))
					return err
				}},
			} {
				b.Run(call.name+"-"+name, func(b *testing.B) {
					if err := call.run(); err != nil { // the keys stored, the script loaded
						b.Fatal(err)
					}
					cpu := redisCPU(b, c)
					b.ResetTimer()
					for range b.N {
						if err := call.run(); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64((redisCPU(b, c)-cpu).Microseconds())/float64(b.N), "redis-µs/call")
					b.ReportMetric(float64(n), "buckets/call")
				})
			}
		}
	}
}
