package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/envoyflows"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

var flowPrefixes atomic.Int64

// rotating sends each call to the next of the replicas, as Envoy spreads
// its calls over a Service's endpoints.
func rotating(replicas []*replica) envoyflows.Call {
	var next atomic.Int64
	return func(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		r := replicas[int(next.Add(1))%len(replicas)]
		return r.client.ShouldRateLimit(ctx, req)
	}
}

// runFlows runs the three usage flows, each on fresh buckets from fresh(),
// away from a minute's edge (their windows are a minute), and wants
// envoyproxy/ratelimit's numbers.
func runFlows(t *testing.T, fresh func() envoyflows.Call) {
	t.Helper()
	envoyflows.AwayFromMinuteEdge(5 * time.Second)
	envoyflows.Expect(t, fresh, 0)
}

// TestUsageFlowsOnRedis replays the calls Envoy makes for limits charged
// after the response, on three replicas of the binary sharing single
// Redis and a Cluster, in exact mode, each call to the next replica: the
// reference's numbers, with a native file that charges always and with
// the reference's file read with its defaults (-rate-limit-algorithm
// fixed_window -charge always -match leaf).
func TestUsageFlowsOnRedis(t *testing.T) {
	configs := map[string]struct {
		file  string
		flags []string
	}{
		"native":    {envoyflows.NativeConfig, nil},
		"reference": {envoyflows.Config, []string{"-rate-limit-algorithm", "fixed_window", "-charge", "always", "-match", "leaf"}},
	}
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			args := redisArgs(start(t))
			for cname, c := range configs {
				t.Run(cname, func(t *testing.T) {
					runFlows(t, func() envoyflows.Call {
						return rotating(flowReplicas(t, c.file, append(args, c.flags...)...))
					})
				})
			}
		})
	}
}

// flowReplicas starts three replicas of the binary on config with args,
// the response's dynamic metadata on, on Redis keys of their own.
func flowReplicas(t *testing.T, config string, args ...string) []*replica {
	t.Helper()
	prefix := fmt.Sprintf("flow%d:", flowPrefixes.Add(1))
	return binaryReplicas(t, 3, config, append(args, "-redis-key-prefix", prefix, "-response-dynamic-metadata")...)
}

// TestStartedAsRatelimitAnswersAsTheReference starts the binary as
// ratelimit, set only by the reference's variables, on the reference's
// file: the usage flows give its numbers; a 1/minute limit resets at the
// minute's end; only the deepest node counts; no header is added.
func TestStartedAsRatelimitAnswersAsTheReference(t *testing.T) {
	srv := redistest.Start(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	leaf := "domain: leaf\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    descriptors:\n      - key: action\n        rate_limit: {unit: minute, requests_per_unit: 10}\n"
	for name, text := range map[string]string{"usage.yaml": envoyflows.Config, "leaf.yaml": leaf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rl := startAsRatelimit(t, "127.0.0.1", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr(), "USE_STATSD=false",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RESPONSE_DYNAMIC_METADATA=true")
	conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	runFlows(t, func() envoyflows.Call {
		if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
			return client.ShouldRateLimit(ctx, req)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	envoyflows.AwayFromMinuteEdge(3 * time.Second)
	req := request([]string{"user=alice", "action=trade"})
	req.Domain = "leaf"
	var got []string
	for range 3 {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, rl.out)
		}
		st := resp.GetStatuses()[0]
		got = append(got, resp.GetOverallCode().String())
		if len(resp.GetResponseHeadersToAdd()) > 0 {
			t.Errorf("headers %v without LIMIT_RESPONSE_HEADERS_ENABLED", resp.GetResponseHeadersToAdd())
		}
		end := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute))
		if d := st.GetDurationUntilReset().AsDuration(); d > end+time.Second || d < end-time.Second {
			t.Errorf("duration_until_reset %s, want the minute's end in %s", d, end)
		}
		if st.GetCurrentLimit().GetRequestsPerUnit() != 10 {
			t.Errorf("current_limit %v, want the deepest node's 10 a minute", st.GetCurrentLimit())
		}
	}
	if strings.Join(got, " ") != "OK OK OK" {
		t.Fatalf("three calls under a parent of 1 a minute and a leaf of 10: %v, want all OK (only the leaf counts)", got)
	}
}

// TestUsageFlowsLocalFirst replays the same flows over three local-first
// replicas of the binary, each call to the next: within one request of
// the reference's numbers (a replica's unused units count on Redis, so a
// check may find a budget spent a little early).
func TestUsageFlowsLocalFirst(t *testing.T) {
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			args := append(redisArgs(start(t)), "-sync-interval", localFirstInterval.String())
			fresh := func() envoyflows.Call { return rotating(flowReplicas(t, envoyflows.NativeConfig, args...)) }
			envoyflows.AwayFromMinuteEdge(5 * time.Second)
			envoyflows.Expect(t, fresh, 1)
		})
	}
}

// TestQuotaModeLocalFirst: two quota descriptors of 100 a minute, charged
// one hit each by 20 requests through three local-first replicas of the
// binary: every request passes, as on exact replicas (a quota bucket asks
// Redis for units like any other, and says it is over only when Redis has
// no room).
func TestQuotaModeLocalFirst(t *testing.T) {
	rs := flowReplicas(t, `
domain: usage
rate_limit_algorithm: fixed_window
descriptors:
  - key: backend
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`, "-store", "redis", "-redis-url", redistest.Start(t).URL(), "-sync-interval", localFirstInterval.String())
	envoyflows.AwayFromMinuteEdge(3 * time.Second)
	req := request([]string{"backend=a"}, []string{"backend=b"})
	req.Domain = "usage"
	over := 0
	for i := range 20 {
		if rs[i%3].call(t, req).GetOverallCode() != rlsv3.RateLimitResponse_OK {
			over++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if over > 0 {
		t.Fatalf("%d of 20 requests OVER_LIMIT with both quotas far from their limit", over)
	}
}
