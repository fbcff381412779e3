package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/memcachedtest"
)

// TestStartedAsRatelimitOnMemcached starts two replicas as ratelimit with
// BACKEND_TYPE=memcache on one memcached, as two reference replicas would
// run: a limit of 3 a minute, six calls alternating between them, answer
// OK three times then OVER_LIMIT three times, counted in the reference's
// key. With memcached stopped, each replica answers by its failure mode.
func TestStartedAsRatelimitOnMemcached(t *testing.T) {
	srv := memcachedtest.New(t)
	srv.Restart()
	root := t.TempDir()
	configDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		t.Fatal(err)
	}
	config := "domain: mc\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n"
	if err := os.WriteFile(filepath.Join(configDir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + srv.Addr(), "USE_STATSD=false",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"RLS_ADMIN_ADDR="} // two replicas on one host: no admin port
	a := startAsRatelimit(t, "127.0.0.1", env...)
	b := startAsRatelimit(t, "127.0.0.1", append(env, "RLS_FAILURE_MODE=allow")...)
	clients := make([]rlsv3.RateLimitServiceClient, 2)
	for i, p := range []*process{a, b} {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The six calls must fall in one minute's window.
	if now := time.Now(); now.Second() >= 55 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 100*time.Millisecond).Sub(now))
	}
	start := time.Now().Unix() / 60 * 60
	req := &rlsv3.RateLimitRequest{Domain: "mc", Descriptors: request([]string{"user=alice"}).Descriptors}
	var answers []string
	for i := range 6 {
		resp, err := clients[i%2].ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("call %d: %v; output:\n%s\n%s", i, err, a.out, b.out)
		}
		answers = append(answers, resp.GetOverallCode().String())
	}
	if got := strings.Join(answers, " "); got != "OK OK OK OVER_LIMIT OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("six calls alternating at 3 a minute: %s", got)
	}
	// Every hit counted (the reference's default), in its key and format.
	key := fmt.Sprintf("mc_user_alice_%d", start)
	if it, err := srv.Client(t).Get(key); err != nil || string(it.Value) != "6" {
		t.Fatalf("the reference's key %s: %v, %v; want 6", key, it, err)
	}

	srv.Stop()
	req = &rlsv3.RateLimitRequest{Domain: "mc", Descriptors: request([]string{"user=bob"}).Descriptors}
	if _, err := clients[0].ShouldRateLimit(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("memcached stopped, the default failure mode: %v, want Unavailable", err)
	}
	resp, err := clients[1].ShouldRateLimit(ctx, req)
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("memcached stopped, RLS_FAILURE_MODE=allow: %v, %v; want OK", resp, err)
	}
}
