package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const benchConfig = `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 1000000, drip_rate: 1us}
    descriptors:
      - key: action
        leaky_bucket: {size: 1000000, drip_rate: 1us}
`

// benchRequests returns n two-level requests over distinct users.
func benchRequests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = request("api", desc(fmt.Sprintf("user=u%d", i), fmt.Sprintf("action=a%d", i%10)))
	}
	return reqs
}

// BenchmarkShouldRateLimit measures one call on the memory store with a
// two-level descriptor, from validation to the response and its headers.
func BenchmarkShouldRateLimit(b *testing.B) {
	svc, _ := newService(b, Options{Config: loadConfig(b, benchConfig), Clock: time.Now})
	reqs := benchRequests(10000)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkShouldRateLimitParallel(b *testing.B) {
	svc, _ := newService(b, Options{Config: loadConfig(b, benchConfig), Clock: time.Now})
	reqs := benchRequests(10000)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
