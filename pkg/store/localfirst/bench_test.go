package localfirst

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BenchmarkApply decides requests of two buckets on 10000 keys that hold
// leases: the local path, as the memory store's BenchmarkApply.
func BenchmarkApply(b *testing.B) {
	s, _ := New(newRemote(), Options{Interval: time.Hour})
	defer s.Close()
	big := limit.Limit{Size: 1 << 30, DripRate: time.Minute, DripSize: 1}
	requests := make([][]limit.Bucket, 10000)
	for i := range requests {
		k := fmt.Sprintf("api|user=u%d", i)
		requests[i] = []limit.Bucket{{Key: k, Limit: big, Hits: 1}, {Key: k + "|action=a", Limit: big, Hits: 1}}
	}
	res := make([]limit.Result, 2)
	for range 3 { // seen, learnt: decided here from now on
		for _, bs := range requests {
			if err := s.Apply(context.Background(), time.Now(), bs, res); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		res := make([]limit.Result, 2)
		i := 0
		for pb.Next() {
			i++
			if err := s.Apply(context.Background(), time.Now(), requests[i%len(requests)], res); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSync syncs, every 100ms, a table of 20,000 buckets that hold
// enough units and are idle: nine syncs in ten look only at the buckets
// used in their interval (none), the tenth at all of them.
func BenchmarkSync(b *testing.B) {
	s, _ := New(newRemote(), Options{Interval: 100 * time.Millisecond, ManualSync: true})
	defer s.Close()
	big := limit.Limit{Size: 1 << 30, DripRate: time.Minute, DripSize: 1}
	now := time.Now()
	res := make([]limit.Result, 1)
	for round := range 3 {
		for i := range 20000 {
			bs := []limit.Bucket{{Key: fmt.Sprintf("api|user=u%d", i), Limit: big, Hits: 1}}
			if err := s.Apply(context.Background(), now, bs, res); err != nil {
				b.Fatal(err)
			}
		}
		if round < 2 {
			s.Sync(context.Background(), now)
		}
	}
	b.ResetTimer()
	for range b.N {
		s.Sync(context.Background(), now)
	}
}
