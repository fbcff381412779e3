package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// fleetConfig is the limits of the fleet test: rls-bench's buckets
// (user=u%d,action=a%d) and the RLS callers', large enough that all is
// admitted.
const fleetConfig = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 1000000}
`

// timedCaller calls ShouldRateLimit at a steady rate and keeps each
// call's latency, by the time it began.
type timedCaller struct {
	mu       sync.Mutex
	calls    []timedCall
	firstErr error // of the calls p99 last looked at
	pacer
}

type timedCall struct {
	at   time.Time
	took time.Duration
	err  error
}

func startTimedCaller(t *testing.T, addr string, rate float64) *timedCaller {
	t.Helper()
	client := rlsv3.NewRateLimitServiceClient(dial(t, addr))
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "rls"}, {Key: "action", Value: "call"}}}}}
	c := &timedCaller{}
	c.start(rate, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		begin := time.Now()
		_, err := client.ShouldRateLimit(ctx, req)
		c.mu.Lock()
		c.calls = append(c.calls, timedCall{begin, time.Since(begin), err})
		c.mu.Unlock()
		return err == nil
	})
	t.Cleanup(c.halt)
	return c
}

// p99 is the 99th percentile of the latencies of the calls begun from
// start to end, with their number and how many failed.
func (c *timedCaller) p99(start, end time.Time) (p99 time.Duration, calls, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var took []time.Duration
	for _, call := range c.calls {
		if call.at.Before(start) || !call.at.Before(end) {
			continue
		}
		took = append(took, call.took)
		if call.err != nil {
			if failed == 0 {
				c.firstErr = fmt.Errorf("at %s, after %s: %w", call.at.Format("15:04:05.000"), call.took, call.err)
			}
			failed++
		}
	}
	if len(took) == 0 {
		return 0, 0, 0
	}
	slices.Sort(took)
	return took[len(took)*99/100], len(took), failed
}

// fleetResult is what rls-bench rlqs reports of the fleet's streams.
type fleetResult struct {
	Streams         int64   `json:"streams"`
	StreamErrors    int64   `json:"stream_errors"`
	Reassigned      int64   `json:"reassigned"`
	ReassignedP99ms float64 `json:"reassigned_p99_ms"`
	ReassignedMaxMs float64 `json:"reassigned_max_ms"`
	NotReassigned   int64   `json:"not_reassigned"`
	Answered        int64   `json:"answered"`
	Unanswered      int64   `json:"unanswered"`
}

// TestRLQSFleetReconnects: 2,000 Envoys (rls-bench rlqs, on a connection
// each) report 25 buckets every 5 s to two replicas of one Redis (single,
// then Cluster) at their default flags, 1,000 on each, while an RLS caller calls the first 200
// times a second. The second replica is killed; its 1,000 Envoys open
// streams on the first within a second, all of their buckets' first
// reports at once. Every one of them is answered there within two report
// intervals of its stream's end; no RLS call fails (one in a thousand
// after the kill, at most), and their p99 in the 10 s after the kill
// stays within three times the p99 of the 10 s before (or 20 ms). (Before reports took turns, the moved Envoys' store
// calls took every connection to Redis and RLS calls failed.)
func TestRLQSFleetReconnects(t *testing.T) {
	skipShort(t)
	// One after the other: each fleet takes the machine.
	for _, b := range []rlqsBackend{rlqsSingle, rlqsCluster} {
		t.Run(b.name, func(t *testing.T) { testFleetReconnects(t, b.args(t)) })
	}
}

func testFleetReconnects(t *testing.T, store []string) {
	const (
		envoys   = 2000
		buckets  = 25
		interval = 5 * time.Second
	)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(fleetConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	store = append([]string{"-config", dir}, store...)
	admin := func() string { return "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)) }
	a, b := launch(t, "", admin(), store...), launch(t, "", admin(), store...)
	caller := startTimedCaller(t, a.grpcAddr, 200)

	// The Envoys start over one interval; the kill comes three intervals
	// after all have reported, and the run goes on two more and a margin.
	run := 6*interval + 10*time.Second
	bench := exec.Command(binarytest.BuildCommand(t, "../..", "rls-bench"), "rlqs", "-target", a.grpcAddr+","+b.grpcAddr,
		"-instances", strconv.Itoa(envoys), "-buckets", strconv.Itoa(buckets), "-interval", interval.String(), "-requests", "10",
		"-reopen", "1s", "-warmup", "0s", "-duration", run.String(), "-format", "json")
	out := &binarytest.Output{}
	bench.Stdout, bench.Stderr = out, out
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if bench.ProcessState == nil {
			bench.Process.Kill()
			bench.Wait()
		}
	})
	streams := func(p *process) float64 { return scrape(t, p.httpAddr, "envoy_rls_rlqs_streams") }
	waitUntil(t, 3*interval, "1,000 streams on each replica", func() bool { return streams(a) == envoys/2 && streams(b) == envoys/2 })
	time.Sleep(3 * interval)

	b.cmd.Process.Kill()
	b.cmd.Wait()
	killed := time.Now()
	waitUntil(t, 2*interval, "every Envoy's stream on the first replica", func() bool { return streams(a) == envoys })
	moved := time.Since(killed)
	time.Sleep(10*time.Second - moved)
	before, nBefore, failedBefore := caller.p99(killed.Add(-10*time.Second), killed)
	after, nAfter, failedAfter := caller.p99(killed, killed.Add(10*time.Second))

	if err := bench.Wait(); err != nil {
		t.Fatalf("rls-bench: %v\n%s", err, out)
	}
	var res fleetResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("rls-bench's report: %v\n%s", err, out)
	}
	t.Logf("replica B killed; all %d streams on A %s after; %d Envoys answered on A after their stream ended, p99 %.0f ms, max %.0f ms after, %d not; RLS p99 %s before (%d calls, %d failed), %s after (%d calls, %d failed)",
		envoys, moved.Round(10*time.Millisecond), res.Reassigned, res.ReassignedP99ms, res.ReassignedMaxMs, res.NotReassigned,
		before.Round(10*time.Microsecond), nBefore, failedBefore, after.Round(10*time.Microsecond), nAfter, failedAfter)
	if res.Reassigned != envoys/2 || res.NotReassigned != 0 {
		t.Errorf("%d Envoys answered again after their stream ended and %d not, want all %d of the killed replica's", res.Reassigned, res.NotReassigned, envoys/2)
	}
	if max := time.Duration(res.ReassignedMaxMs * float64(time.Millisecond)); max > 2*interval {
		t.Errorf("an Envoy was answered again %s after its stream ended, past two report intervals (%s)", max, 2*interval)
	}
	// None may fail before; after, one in a thousand at most: a Cluster's
	// six Redis share the two CPUs with the rest, and a node that cannot
	// run for 100 ms times a call out whatever the service does.
	if failedBefore > 0 || failedAfter*1000 > nAfter {
		t.Errorf("%d RLS calls failed before the kill and %d of %d after; the first: %v", failedBefore, failedAfter, nAfter, caller.firstErr)
	}
	// The Envoys' load shares the machine's two CPUs with the replicas and
	// Redis, and moving 1,000 of them costs them too: three times.
	if limit := max(3*before, 20*time.Millisecond); after > limit {
		t.Errorf("the RLS calls' p99 went from %s before the kill to %s after, above %s", before, after, limit)
	}
	t.Logf("replica A answered %v reports by the failure mode, %v from the last division",
		scrape(t, a.httpAddr, "envoy_rls_rlqs_failures_total"), scrape(t, a.httpAddr, "envoy_rls_rlqs_fail_static_total"))
	if t.Failed() {
		t.Logf("rls-bench: %s", out)
		t.Logf("replica A's log:\n%s", a.out)
	}
}
