package region

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// benchRegions are three regions, a replica each, on boards in process,
// each using the same n buckets: what an interval's exchange costs the
// service, without Redis (rls-bench regions measures it with).
type benchRegions struct {
	xs      []*Exchange
	buckets [][]limit.Bucket // each region's, as it is asked them
	clock   time.Time
}

func newBenchRegions(b *testing.B, n int) *benchRegions {
	names := []string{"ap", "eu", "us"}
	boards := map[string]*memBoard{}
	for _, name := range names {
		boards[name] = newMemBoard()
	}
	br := &benchRegions{clock: time.Unix(1_800_000_000, 0)}
	l := limit.Limit{Size: 10, DripRate: 100 * time.Millisecond, DripSize: 1}
	for i, name := range names {
		peers := map[string]Board{}
		for _, other := range names {
			if other != name {
				peers[other] = boards[other]
			}
		}
		x, err := New(Options{Region: name, Regions: names, Own: boards[name], Peers: peers,
			Interval: time.Second, Silence: time.Minute, Clock: func() time.Time { return br.clock }})
		if err != nil {
			b.Fatal(err)
		}
		bs := make([]limit.Bucket, n)
		for k := range bs {
			bs[k] = limit.Bucket{Key: fmt.Sprintf("api|user_u%d", k), Limit: l, Hits: int64(i + 1)}
		}
		br.xs, br.buckets = append(br.xs, x), append(br.buckets, bs)
	}
	return br
}

// feed asks and admits every region's buckets once, at the clock.
func (br *benchRegions) feed() {
	ctx := context.Background()
	res := make([]limit.Result, 1)
	for i, x := range br.xs {
		st := x.Wrap(admitEverything{})
		for k := range br.buckets[i] {
			req := br.buckets[i][k : k+1]
			x.Asked(req)
			st.Apply(ctx, br.clock, req, res)
		}
	}
}

// interval runs one interval from its start: the buckets used, every
// region's Publish, then half an interval later every region's Divide.
func (br *benchRegions) interval(b *testing.B, feed bool) {
	ctx := context.Background()
	if feed {
		b.StopTimer()
		br.feed()
		b.StartTimer()
	}
	br.clock = br.clock.Add(time.Second)
	epoch := br.clock.UnixNano() / int64(time.Second)
	for _, x := range br.xs {
		if err := x.Publish(ctx, epoch-1, br.clock); err != nil {
			b.Fatal(err)
		}
	}
	for _, x := range br.xs {
		if err := x.Divide(ctx, epoch, br.clock.Add(time.Second/2)); err != nil {
			b.Fatal(err)
		}
	}
}

type admitEverything struct{}

func (admitEverything) Apply(_ context.Context, _ time.Time, buckets []limit.Bucket, results []limit.Result) error {
	for i := range buckets {
		results[i] = limit.Result{Admitted: true}
	}
	return nil
}

// BenchmarkExchange is an interval's exchange of three regions, a replica
// each, each using every one of the buckets that interval: each region's
// Publish (its report, encoded, and the reports its own board holds,
// parsed) and Divide (the reports read again, and every bucket's claims
// worked out). The buckets' use (Asked, Apply) is not timed. Per
// interval, for the three regions together.
func BenchmarkExchange(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			br := newBenchRegions(b, n)
			for range 3 {
				br.interval(b, true)
			}
			for _, x := range br.xs {
				if got := len(x.claims.Load().keys); got != n {
					b.Fatalf("%s holds %d claims, want %d", x.opts.Region, got, n)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				br.interval(b, true)
			}
		})
	}
}

// BenchmarkParseReport reads a report of 100,000 buckets: into a map
// (ParseReport), and as an exchange reads one, into a list in the order
// of its keys, reusing the last one's room.
func BenchmarkParseReport(b *testing.B) {
	r := Report{Epoch: 7, Buckets: map[uint64]Record{}}
	for k := range 100000 {
		r.Buckets[KeyHash(fmt.Sprint(k))] = Record{Demand: 1, Usage: 2, Bucket: Bucket{Size: 10, Rate: 10}}
	}
	enc := string(AppendReport(nil, r))
	again, err := parseReport("eu", "a", enc, nil)
	if err != nil {
		b.Fatal(err)
	}
	sorted := string(AppendReport(nil, again))
	b.Run("map", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseReport("eu", "a", []byte(enc)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		b.SetBytes(int64(len(sorted)))
		b.ReportAllocs()
		var list []keyed
		for b.Loop() {
			r, err := parseReport("eu", "a", sorted, list)
			if err != nil {
				b.Fatal(err)
			}
			list = r.list
		}
	})
}
