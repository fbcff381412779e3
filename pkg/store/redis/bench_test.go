package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BenchmarkApply decides two-level requests over 10000 users on a real
// Redis, concurrently, each call on its own and batched into pipelines.
func BenchmarkApply(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name     string
		pipeline Pipeline
	}{{"Unbatched", Pipeline{}}, {"Pipelined", DefaultPipeline}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(Options{Pipeline: bc.pipeline, Prefix: "bench-" + bc.name + ":", Connect: &ClientOptions{URL: srv.URL()}})
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
		})
	}
}
