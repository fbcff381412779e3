package ui

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// costConfig is scripts/bench.yaml's shape, its buckets large (every call
// admitted) or of one request (every call after a bucket's first refused).
const costConfig = `domain: api
descriptors:
  - key: user
    leaky_bucket: {size: %[1]d, drip_rate: 1h}
    descriptors:
      - key: action
        leaky_bucket: {size: %[1]d, drip_rate: 1h}
`

// BenchmarkDecisionPath is a call on the memory store, as the service
// makes it, with its metrics and with the page's counts beside them: the
// difference is the page's cost per call (two levels each).
func BenchmarkDecisionPath(b *testing.B) {
	for _, shape := range []struct {
		name string
		size int
	}{{"admitted", 1_000_000_000}, {"refused", 1}} {
		for _, page := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/page=%v", shape.name, page), func(b *testing.B) {
				cfg, _, err := descriptors.Parse(descriptors.Source{Name: "bench.yaml", Data: fmt.Appendf(nil, costConfig, shape.size)})
				if err != nil {
					b.Fatal(err)
				}
				store, err := memory.New(memory.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
				var obs rls.Observer = metrics.New(0)
				if page {
					a := NewActivity(nil, DefaultCapacity)
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					go a.Run(ctx)
					obs = rls.Observers(obs, a)
				}
				svc, err := rls.New(rls.Options{Store: store, Config: cfg, Observer: obs, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				reqs := make([]*rlsv3.RateLimitRequest, 10000)
				for i := range reqs {
					reqs[i] = &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
						{Key: "user", Value: fmt.Sprintf("u%d", i)}, {Key: "action", Value: fmt.Sprintf("a%d", i%10)}}}}}
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := int(time.Now().UnixNano()) % len(reqs)
					for pb.Next() {
						if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		}
	}
}
