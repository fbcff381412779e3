package rlqs

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// BenchmarkReport is a fleet's reports served in process, without gRPC:
// envoys streams each report the same buckets every second, in turn. Its
// figure per op is one report message; bucket-report/op divides it by
// the buckets in it. The cost of a bucket report must not grow with the
// number of Envoys sharing it.
func BenchmarkReport(b *testing.B) {
	for _, shape := range []struct{ envoys, buckets int }{{10, 1000}, {50, 200}, {100, 100}, {1000, 10}} {
		b.Run(fmt.Sprintf("%dx%d", shape.envoys, shape.buckets), func(b *testing.B) {
			benchReports(b, shape.envoys, shape.buckets)
		})
	}
}

func benchReports(b *testing.B, envoys, buckets int) {
	// scripts/bench.sh's limits: two levels, large.
	data, err := os.ReadFile("../../scripts/bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "bench.yaml", Data: data})
	if err != nil {
		b.Fatal(err)
	}
	st, err := memory.New(memory.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Unix(1_800_000_000, 0)
	svc, err := New(Options{Store: st, Registry: NewMemoryRegistry(DefaultDivideEvery), Config: func() *descriptors.Config { return cfg },
		Clock: func() time.Time { return now }, MaxTotalBuckets: envoys * buckets})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([][]byte, envoys)
	for e := range msgs {
		m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "api"}
		for i := range buckets {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"user": fmt.Sprintf("u%d", i), "action": fmt.Sprintf("a%d", i)}},
				NumRequestsAllowed: uint64(50 + (e+i)%100),
			})
		}
		if msgs[e], err = proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	streams := make([]*stream, envoys)
	for e := range streams {
		streams[e] = svc.newStream()
	}
	ctx := context.Background()
	serve := func(n int) {
		e := n % envoys
		if e == 0 {
			now = now.Add(time.Second) // a round of reports a second
		} else {
			now = now.Add(time.Second / time.Duration(envoys))
		}
		r, err := parseReport(msgs[e])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := streams[e].report(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	for n := range 3 * envoys { // three rounds: every bucket subscribed, demands measured
		serve(n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		serve(n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*buckets), "ns/bucket-report")
}
