package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BenchmarkSnapshotLatency measures what writing snapshots costs calls:
// with a million buckets (70% leaky buckets, 20% fixed windows, 10%
// sliding windows of 10 sub-windows), callers charge random buckets for a
// few seconds, first alone, then while snapshots are written back to
// back. It reports the calls' p99 latency both ways and their ratio (the
// bound is 2), and a snapshot's size and write time. A measurement, not
// a check: a loaded machine moves the figures.
//
//	go test ./pkg/store/memory -run XXX -bench SnapshotLatency -benchtime 1x
func BenchmarkSnapshotLatency(b *testing.B) {
	const (
		buckets = 1_000_000
		callers = 4
		phase   = 3 * time.Second
	)
	path := filepath.Join(b.TempDir(), "buckets.snap")
	s, err := New(Options{SweepInterval: -1, MaxBuckets: 2 * buckets, MaxBytes: 1 << 30, Snapshot: SnapshotOptions{Path: path, Interval: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	big := limit.Limit{Size: 1 << 40, DripRate: time.Hour, DripSize: 1}
	kinds := []limit.Limit{big, {Algorithm: limit.FixedWindow, Size: 1 << 40, Window: 24 * time.Hour},
		{Algorithm: limit.SlidingWindow, Size: 1 << 40, Window: time.Hour, Resolution: 6 * time.Minute}}
	reqs := make([]limit.Bucket, buckets)
	for i := range reqs {
		k := 0
		if i%10 >= 7 {
			k = 1 + i%10/9 // 7, 8: fixed; 9: sliding
		}
		reqs[i] = limit.Bucket{Key: fmt.Sprintf("api|user=u%07d|action=trade", i), Limit: kinds[k], Hits: 1}
	}
	r := make([]limit.Result, 1)
	for i := range reqs {
		s.Apply(context.Background(), time.Now(), reqs[i:i+1], r)
	}
	if s.Len() != buckets {
		b.Fatalf("%d buckets, want %d", s.Len(), buckets)
	}

	// run charges from callers for a phase and returns the calls' latencies.
	run := func() []time.Duration {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			all  []time.Duration
			stop atomic.Bool
		)
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), 1))
				r := make([]limit.Result, 1)
				lat := make([]time.Duration, 0, 1<<20)
				for !stop.Load() {
					i := rng.IntN(len(reqs))
					start := time.Now()
					s.Apply(context.Background(), start, reqs[i:i+1], r)
					lat = append(lat, time.Since(start))
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
		}
		time.Sleep(phase)
		stop.Store(true)
		wg.Wait()
		slices.Sort(all)
		return all
	}
	p := func(lat []time.Duration, q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }

	b.ResetTimer()
	for b.Loop() {
		alone := run()
		var (
			writes       []SnapshotStats
			done         = make(chan struct{})
			writing      sync.WaitGroup
			stopSnapshot atomic.Bool
		)
		writing.Add(1)
		go func() {
			defer writing.Done()
			close(done)
			for !stopSnapshot.Load() {
				st, err := s.WriteSnapshot()
				if err != nil {
					b.Error(err)
					return
				}
				writes = append(writes, st)
			}
		}()
		<-done
		during := run()
		stopSnapshot.Store(true)
		writing.Wait()
		if len(writes) == 0 {
			b.Fatal("no snapshot written")
		}
		var took, held time.Duration
		for _, w := range writes {
			took += w.Took
			held = max(held, w.Held)
		}
		took /= time.Duration(len(writes))
		b.ReportMetric(float64(p(alone, 0.99).Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(p(during, 0.99).Nanoseconds()), "p99-snapshot-ns")
		b.ReportMetric(float64(p(during, 0.99))/float64(p(alone, 0.99)), "p99-ratio")
		b.ReportMetric(float64(writes[0].Bytes)/(1<<20), "snapshot-MiB")
		b.ReportMetric(float64(took.Milliseconds()), "write-ms")
		b.ReportMetric(float64(held.Microseconds()), "shard-lock-µs")
		start := time.Now()
		back, err := New(Options{SweepInterval: -1, MaxBuckets: 2 * buckets, MaxBytes: 1 << 30, Snapshot: SnapshotOptions{Path: path, Interval: time.Hour}})
		if err != nil {
			b.Fatal(err)
		}
		read := time.Since(start)
		if back.Len() != buckets {
			b.Errorf("%d buckets read back, want %d", back.Len(), buckets)
		}
		back.Close()
		b.ReportMetric(float64(read.Milliseconds()), "read-ms")
		b.Logf("%d buckets, %d callers: p50 %v, p99 %v, p99.9 %v alone (%d calls); p50 %v, p99 %v, p99.9 %v during %d snapshots of %d buckets, %.1f MiB, written in %v on average, a shard locked %v at most; read back in %v",
			s.Len(), callers, p(alone, 0.5), p(alone, 0.99), p(alone, 0.999), len(alone),
			p(during, 0.5), p(during, 0.99), p(during, 0.999), len(writes), writes[0].Buckets, float64(writes[0].Bytes)/(1<<20), took.Round(time.Millisecond), held, read.Round(time.Millisecond))
	}
}
