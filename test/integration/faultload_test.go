package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// faultConfig is the limits of the fault tests: load's buckets never fill
// (every call Redis decides is OK, so the OK share is the decided share),
// and exact's hold 20 for the exactness check after a fault.
const faultConfig = `
domain: api
descriptors:
  - key: load
    leaky_bucket: {size: 1000000, drip_rate: 1ms}
  - key: tenant
    leaky_bucket: {size: 1000000, drip_rate: 1ms}
    descriptors:
      - key: user
        leaky_bucket: {size: 1000000, drip_rate: 1ms}
  - key: exact
    leaky_bucket: {size: 20, drip_rate: 1h}
`

// Under fault load, callers send what Envoy sends, each call with
// faultDeadline, the failure mode answering (Unavailable) what Redis could
// not decide within faultStoreTimeout: half the deadline is left for the
// answer, on a machine the Redis processes, the replicas and the callers
// share.
const (
	faultCallers      = 16
	faultDeadline     = 100 * time.Millisecond
	faultStoreTimeout = 50 * time.Millisecond
	faultSlice        = 500 * time.Millisecond
)

// faultReplicas starts n replicas on connect as the binary runs them
// against Redis (startReplicas, with its over-limit cache): a store
// timeout and its margin, the failure mode Unavailable, the health watch
// that renews failed connections, and the breaker b.
func faultReplicas(t *testing.T, n int, connect redis.ClientOptions, b redis.Breaker) []*replica {
	t.Helper()
	rs := startReplicas(t, n, replicaOptions{client: connect, config: parseConfig(t, faultConfig), breaker: &b,
		service: func(o *rls.Options) { o.StoreTimeout = faultStoreTimeout }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, r := range rs {
		go rls.WatchStore(ctx, r.store, health.NewServer(), slog.New(slog.DiscardHandler), false)
	}
	return rs
}

// parseConfig parses a config file's text.
func parseConfig(t *testing.T, yaml string) *descriptors.Config {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "test.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tally counts the calls of one slice of a fault load by how they ended.
type tally struct {
	calls, ok, over, failed, late, wrong int
	slowest                              time.Duration
	failedTime                           time.Duration // of the calls answered Unavailable
	// lag is how late the load's probe woke at worst: the machine's own
	// delay, which no store or service can answer within.
	lag time.Duration
}

// starvedLag is a probe lag past which a slice's late or undecided calls
// are the machine's, not the service's: a fifth of a call's deadline spent
// waiting for a CPU (the race detector and other test packages share it).
const starvedLag = faultDeadline / 5

// lateShare: at most one call in lateShare may be late outside the lags
// the probe saw. A call's goroutines can be held past its deadline (the
// race detector, six Redis processes and the callers on two CPUs) while
// the probe's wakes in time; a service that misses deadlines misses many.
const lateShare = 2000

// probeTick is the probe's sleep: it measures the machine's lag.
const probeTick = 5 * time.Millisecond

func (a *tally) add(b tally) {
	a.calls, a.ok, a.over, a.failed, a.late, a.wrong = a.calls+b.calls, a.ok+b.ok, a.over+b.over, a.failed+b.failed, a.late+b.late, a.wrong+b.wrong
	a.slowest = max(a.slowest, b.slowest)
	a.failedTime += b.failedTime
	a.lag = max(a.lag, b.lag)
}

// starved says the machine was too busy in this slice to judge its timing.
func (a tally) starved() bool { return a.lag > starvedLag }

// failedMean is how long the calls answered Unavailable took, on average.
func (a tally) failedMean() time.Duration {
	if a.failed == 0 {
		return 0
	}
	return a.failedTime / time.Duration(a.failed)
}

// okShare is the share of calls answered OK.
func (a tally) okShare() float64 {
	if a.calls == 0 {
		return 0
	}
	return float64(a.ok) / float64(a.calls)
}

func (a tally) String() string {
	out := fmt.Sprintf("%5d calls: %5.1f%% OK, %d over limit, %d Unavailable (in %s on average), %d late, %d wrong; slowest %s",
		a.calls, 100*a.okShare(), a.over, a.failed, a.failedMean().Round(100*time.Microsecond), a.late, a.wrong, a.slowest.Round(time.Millisecond))
	if a.starved() {
		out += fmt.Sprintf("; the machine lagged %s", a.lag.Round(time.Millisecond))
	}
	return out
}

// faultLoad is callers calling replicas in turn, back to back, each call
// on a key of its own among many (so that every slot of a Cluster is
// used), tallied per faultSlice since it started.
type faultLoad struct {
	start  time.Time
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	slices []tally
	wrongs []string
	n      atomic.Int64
	// lates are the late calls' spans, and lags the probe's sleeps that
	// woke past starvedLag: a late call that ran while the machine lagged
	// is the machine's even if its slice's probe woke in time (settle).
	lates, lags []span
}

// span is a stretch of a load's time.
type span struct{ from, to time.Duration }

func (a span) overlaps(b span) bool { return a.from < b.to && b.from < a.to }

// oneLevel and twoLevels are the descriptors of a load's calls: caller c's
// i-th call is for one of 2000 keys of its own (under one of 500 tenants).
func oneLevel(c, i int) []string { return []string{fmt.Sprintf("load=c%d-%d", c, i%2000)} }

func twoLevels(c, i int) []string {
	return []string{fmt.Sprintf("tenant=t%d", (c*2000+i)%500), fmt.Sprintf("user=c%d-%d", c, i%2000)}
}

// startLoad starts faultCallers callers on replicas, each call for the
// descriptor entries pairs returns; stopLoad ends them.
func startLoad(t *testing.T, replicas []*replica, pairs func(c, i int) []string) *faultLoad {
	t.Helper()
	warm(t, replicas, pairs)
	l := &faultLoad{start: time.Now(), stop: make(chan struct{})}
	for c := range faultCallers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				n := l.n.Add(1)
				r := replicas[int(n)%len(replicas)]
				l.call(r, pairs(c, i))
				time.Sleep(2 * time.Millisecond) // a steady load, not a flood
			}
		}()
	}
	// The probe: how late a short sleep wakes, per slice.
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			begin := time.Now()
			time.Sleep(probeTick)
			lag := time.Since(begin) - probeTick
			l.record(begin, tally{lag: lag})
			if lag > starvedLag {
				l.mu.Lock()
				l.lags = append(l.lags, span{begin.Sub(l.start), time.Since(l.start)})
				l.mu.Unlock()
			}
		}
	}()
	t.Cleanup(l.stopLoad)
	return l
}

// warm makes 32 calls on each replica, for keys of a caller of its own
// (faultCallers, past the load's), before the load: a replica's first
// calls connect, learn a Cluster's slots and load the script, which is not
// what a fault test judges (a running service has done all that).
func warm(t *testing.T, replicas []*replica, pairs func(c, i int) []string) {
	t.Helper()
	for _, r := range replicas {
		for i := range 32 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := r.client.ShouldRateLimit(ctx, request(pairs(faultCallers, i)))
			cancel()
			if err != nil {
				t.Fatalf("warming a replica before the load: %v", err)
			}
		}
	}
}

// call makes one call and tallies how it ended.
func (l *faultLoad) call(r *replica, pairs []string) {
	begin := time.Now() // before the deadline is set: a lag between them counts
	ctx, cancel := context.WithTimeout(context.Background(), faultDeadline)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, request(pairs))
	took := time.Since(begin)
	var one tally
	one.calls, one.slowest = 1, took
	switch code := status.Code(err); {
	case took > faultDeadline || code == codes.DeadlineExceeded:
		one.late = 1
	case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		one.ok = 1
	case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		one.over = 1
	case code == codes.Unavailable:
		one.failed, one.failedTime = 1, took
	default:
		one.wrong = 1
	}
	l.record(begin, one)
	if one.late+one.wrong > 0 {
		l.mu.Lock()
		if one.late > 0 {
			l.lates = append(l.lates, span{begin.Sub(l.start), begin.Sub(l.start) + took})
		}
		if len(l.wrongs) < 10 {
			l.wrongs = append(l.wrongs, fmt.Sprintf("%s after %s: %v %v", strings.Join(pairs, ","), took.Round(time.Millisecond), resp.GetOverallCode(), err))
		}
		l.mu.Unlock()
	}
}

// record adds one to the slice of begin.
func (l *faultLoad) record(begin time.Time, one tally) {
	i := int(begin.Sub(l.start) / faultSlice)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.slices) <= i {
		l.slices = append(l.slices, tally{})
	}
	l.slices[i].add(one)
}

// since returns the time since the load started, for marking a fault.
func (l *faultLoad) since() time.Duration { return time.Since(l.start) }

func (l *faultLoad) stopLoad() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// between sums the slices that start in [from, to).
func (l *faultLoad) between(from, to time.Duration) tally {
	sum, _, _ := l.judged(from, to)
	return sum
}

// judged sums the slices from from to to as between does, and apart from
// them those the machine starved (whose timing says nothing of the
// service), with how many those are.
func (l *faultLoad) judged(from, to time.Duration) (all, clean tally, starved int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle()
	for i, s := range l.slices {
		if at := time.Duration(i) * faultSlice; at >= from && at < to {
			all.add(s)
			if s.starved() {
				starved++
			} else {
				clean.add(s)
			}
		}
	}
	return all, clean, starved
}

// settle marks as starved the slice of each late call that ran while the
// probe saw the machine lag, though the lag began in a later slice: a call
// begun at 2.45 s and stalled by a lag from 2.5 s is the machine's too.
// l.mu must be held.
func (l *faultLoad) settle() {
	for _, c := range l.lates {
		for _, g := range l.lags {
			if i := int(c.from / faultSlice); c.overlaps(g) && i < len(l.slices) {
				l.slices[i].lag = max(l.slices[i].lag, g.to-g.from-probeTick)
			}
		}
	}
}

// backAt returns the start of the first slice at or after from from which
// every call was OK to the end, and whether there is one.
func (l *faultLoad) backAt(from time.Duration) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	back, ok := time.Duration(0), false
	for i, s := range l.slices {
		at := time.Duration(i) * faultSlice
		if at < from {
			continue
		}
		switch {
		case s.calls > 0 && s.ok == s.calls && !ok:
			back, ok = at, true
		case s.ok != s.calls:
			ok = false
		}
	}
	return back, ok
}

// report logs every slice, and fails the test for a call answered late or
// other than OK, over limit or the failure mode's Unavailable.
func (l *faultLoad) report(t *testing.T, marks map[time.Duration]string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle()
	var b strings.Builder
	var all, clean tally
	for i, s := range l.slices {
		at := time.Duration(i) * faultSlice
		fmt.Fprintf(&b, "\n%6s  %s", at, s)
		for m, what := range marks {
			if m >= at && m < at+faultSlice {
				fmt.Fprintf(&b, "  <- %s at %s", what, m.Round(time.Millisecond))
			}
		}
		all.add(s)
		if !s.starved() {
			clean.add(s)
		}
	}
	t.Logf("%d callers, a %s deadline per call, per %s:%s", faultCallers, faultDeadline, faultSlice, b.String())
	if clean.late > clean.calls/lateShare || all.wrong > 0 {
		t.Errorf("%d of %d calls answered late (at most 1 in %d allowed) and %d wrongly, e.g. %q", clean.late, clean.calls, lateShare, all.wrong, l.wrongs)
	} else if clean.late > 0 {
		t.Logf("%d of %d calls answered late outside the lags the probe saw, e.g. %q", clean.late, clean.calls, l.wrongs)
	}
	if n := all.late - clean.late; n > 0 {
		t.Logf("%d calls answered late while the machine lagged past %s: not the service's", n, starvedLag)
	}
}

// admitsExactly sends 60 concurrent calls for one new bucket of size 20,
// over the replicas in turn: exactly 20 must pass.
func admitsExactly(t *testing.T, replicas []*replica, name string) {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := replicas[i%len(replicas)].client.ShouldRateLimit(ctx, request([]string{"exact=" + name}))
			if err != nil {
				errs <- err
				return
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("after the fault: %v", err)
	}
	if got := admitted.Load(); got != 20 {
		t.Fatalf("after the fault, %d of 60 calls for a bucket of 20 were admitted over %d replicas, want exactly 20", got, len(replicas))
	}
}
