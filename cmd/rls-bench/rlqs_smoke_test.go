package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
	"github.com/envoy-rls/envoy-rls/internal/rawgrpc"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// mapStore is limit.DecideAll on a map, as the memory store decides.
type mapStore struct {
	mu     sync.Mutex
	states map[string]limit.State
	calls  atomic.Int64
}

func (m *mapStore) Apply(_ context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	m.calls.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	states := make([]limit.State, len(buckets))
	for i, b := range buckets {
		states[i] = m.states[b.Key]
	}
	admitted := limit.DecideAll(states, buckets, now, results)
	for i, b := range buckets {
		if limit.Saves(b, admitted) {
			m.states[b.Key] = results[i].State
		}
	}
	return nil
}

// startRLQS serves pkg/rlqs on a memory registry and a map store, with a
// limit of 300/s per user, and returns its address.
func startRLQS(t *testing.T) (string, *mapStore) {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "bench.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 300}
`)})
	if err != nil {
		t.Fatal(err)
	}
	st := &mapStore{states: map[string]limit.State{}}
	svc, err := rlqs.New(rlqs.Options{Store: st, Registry: rlqs.NewMemoryRegistry(rlqs.DefaultDivideEvery),
		Config: func() *descriptors.Config { return cfg }})
	if err != nil {
		t.Fatal(err)
	}
	return grpctest.Serve(t, func(g *grpc.Server) { svc.Register(g) }, svc.ServerOptions()...), st
}

// fakeRedis answers each INFO with counters that grow by a step each
// time, as a Redis would while the service calls it.
func fakeRedis(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	var n atomic.Int64
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(conn)
			for range 5 { // *2, $4, INFO, $3, all
				if _, err := r.ReadString('\n'); err != nil {
					break
				}
			}
			k := n.Add(1)
			text := fmt.Sprintf("# CPU\r\nused_cpu_sys:%d.5\r\nused_cpu_user:0\r\n# Commandstats\r\ncmdstat_evalsha:calls=%d,usec=1\r\ncmdstat_info:calls=%d,usec=1\r\n",
				k, 100*k, k)
			fmt.Fprintf(conn, "$%d\r\n%s\r\n", len(text), text)
			conn.Close()
		}
	}()
	return lis.Addr().String()
}

// TestRLQSAgainstService runs the rlqs mode against an in-process RLQS
// service: every report is answered with an assignment of each of its
// buckets, the limit shared by the Envoys denies some of their requests,
// and the costs are read.
func TestRLQSAgainstService(t *testing.T) {
	addr, st := startRLQS(t)
	redis := fakeRedis(t)
	var stdout, stderr strings.Builder
	args := []string{"rlqs", "-target", addr, "-instances", "3", "-buckets", "5", "-interval", "50ms", "-warmup", "150ms",
		"-duration", "400ms", "-bucket", "user=u%d", "-pid", fmt.Sprint(os.Getpid()), "-redis", redis, "-format", "json"}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("rlqs exited %d; stderr:\n%s", code, stderr.String())
	}
	var j rlqsJSON
	if err := json.Unmarshal([]byte(stdout.String()), &j); err != nil {
		t.Fatalf("parsing %q: %v", stdout.String(), err)
	}
	switch {
	case j.Messages < 3*4 || j.BucketReports != 5*j.Messages:
		t.Errorf("%d messages of %d bucket reports: want at least 12 (3 Envoys, 400ms at 50ms), of 5 buckets each", j.Messages, j.BucketReports)
	case j.Answered != j.Messages || j.Unanswered != 0 || j.ShortAnswers != 0 || j.UnknownActions != 0 || j.StreamErrors != 0:
		t.Errorf("answered %d of %d, short %d, unknown %d, stream errors %d (%s)", j.Answered, j.Messages, j.ShortAnswers, j.UnknownActions, j.StreamErrors, j.FirstError)
	case j.Actions[kindTokenBucket] != 5*j.Answered || len(j.Actions) != 1:
		t.Errorf("actions %v, want a token bucket for each bucket of each answer (%d)", j.Actions, 5*j.Answered)
	case j.Streams != 3 || j.Served == 0 || j.ServedPerS <= 0:
		t.Errorf("%d streams, %d served: want one stream per Envoy, reports served", j.Streams, j.Served)
	case !(0 < j.P50us && j.P50us <= j.P99us && j.P99us <= j.MaxUs):
		t.Errorf("latencies p50 %v p99 %v max %v", j.P50us, j.P99us, j.MaxUs)
	case j.Allowed == 0 || j.Denied == 0:
		// 3 Envoys × 2000 requests/s per bucket, on a limit of 300/s.
		t.Errorf("allowed %d, denied %d: want both", j.Allowed, j.Denied)
	case j.ServerCPUus == nil || j.RedisCalls == nil || *j.RedisCalls <= 0 || j.RedisCommands["info"] != 0 || j.RedisCPUus == nil:
		t.Errorf("costs not read: %s", stdout.String())
	}
	if st.calls.Load() == 0 {
		t.Error("the store charged nothing")
	}

	// The text report names what it measured.
	stdout.Reset()
	args = []string{"rlqs", "-target", addr, "-instances", "2", "-buckets", "3", "-interval", "50ms", "-warmup", "100ms", "-duration", "200ms", "-disjoint"}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("text: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"2 Envoys × 3 buckets (buckets of their own)", "bucket reports/s", "p99", "token_bucket", "streams   2 opened, 0 errors"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestRLQSNoService: against a closed port nothing is answered, and the
// run says so.
func TestRLQSNoService(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	var stdout, stderr strings.Builder
	code := run([]string{"rlqs", "-target", addr, "-instances", "2", "-buckets", "2", "-interval", "20ms", "-warmup", "0s", "-duration", "100ms", "-grace", "0s"}, &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "no report was answered") {
		t.Errorf("exit %d, stderr %q; want 1, no report answered", code, stderr.String())
	}
}

// TestRLQSInterruptedWarmup: an interrupt in the warmup ends the Envoys
// and the run at once, with nothing measured.
func TestRLQSInterruptedWarmup(t *testing.T) {
	addr, _ := startRLQS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	var stdout, stderr strings.Builder
	start := time.Now()
	code := runContext(ctx, []string{"rlqs", "-target", addr, "-instances", "2", "-buckets", "2", "-interval", "20ms", "-warmup", "10s"}, &stdout, &stderr)
	if code != exitError || time.Since(start) > 3*time.Second || !strings.Contains(stderr.String(), "context deadline exceeded") {
		t.Errorf("exit %d after %v, stderr %q; want 1 at once", code, time.Since(start), stderr.String())
	}
}

// TestRLQSAgainstNull: the null server answers every bucket of every
// report with a token bucket, at once, on each Envoy's stream.
func TestRLQSAgainstNull(t *testing.T) {
	addr := grpctest.Serve(t, registerNullRLQS, rawgrpc.ServerOption())
	var stdout, stderr strings.Builder
	args := []string{"rlqs", "-target", addr, "-instances", "3", "-buckets", "5", "-interval", "50ms", "-warmup", "100ms",
		"-duration", "300ms", "-format", "json"}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("rlqs exited %d; stderr:\n%s", code, stderr.String())
	}
	var j rlqsJSON
	if err := json.Unmarshal([]byte(stdout.String()), &j); err != nil {
		t.Fatalf("parsing %q: %v", stdout.String(), err)
	}
	if j.Messages == 0 || j.Answered != j.Messages || j.ShortAnswers != 0 || j.UnknownActions != 0 || j.StreamErrors != 0 ||
		j.Actions[kindTokenBucket] != 5*j.Answered || len(j.Actions) != 1 {
		t.Fatalf("answered %d of %d, short %d, unknown %d, stream errors %d (%s), actions %v", j.Answered, j.Messages,
			j.ShortAnswers, j.UnknownActions, j.StreamErrors, j.FirstError, j.Actions)
	}
}
