package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestStartedAsIstiosSample starts the binary the way Istio's rate-limit
// sample starts envoyproxy/ratelimit: as ratelimit, with no arguments, set
// only by the reference's variables (the config where RUNTIME_* put it,
// Redis at REDIS_URL, statsd off). Its probes answer, and a limit of the
// file applies on Redis.
func TestStartedAsIstiosSample(t *testing.T) {
	srv := redistest.Start(t)
	root := t.TempDir()
	configDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The sample's config, as its ConfigMap mounts it.
	config := "domain: ratelimit\ndescriptors:\n  - key: PATH\n    value: \"/productpage\"\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n  - key: PATH\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n"
	if err := os.WriteFile(filepath.Join(configDir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(envoyRLS(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	httpPort, grpcPort := redistest.FreePort(t), redistest.FreePort(t)
	cmd := exec.Command(ratelimit)
	cmd.Env = []string{
		"LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr(), "USE_STATSD=false",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"HOST=::1", "GRPC_HOST=::1", "PORT=" + strconv.Itoa(httpPort), "GRPC_PORT=" + strconv.Itoa(grpcPort),
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	httpAddr := net.JoinHostPort("::1", strconv.Itoa(httpPort))
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get("http://" + httpAddr + "/healthcheck")
		if err == nil {
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == http.StatusOK && string(body) == "OK" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthcheck did not answer 200 OK within 10s (%v); output:\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn, err := grpc.NewClient(net.JoinHostPort("::1", strconv.Itoa(grpcPort)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health of ratelimit: %v, %v", h, err)
	}
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "ratelimit", Descriptors: request([]string{"PATH=/productpage"}).Descriptors}
	var codes []string
	for range 2 {
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, out)
		}
		codes = append(codes, resp.GetOverallCode().String())
	}
	if strings.Join(codes, " ") != "OK OVER_LIMIT" {
		t.Fatalf("two calls at a limit of 1 a minute: %v, want OK then OVER_LIMIT; output:\n%s", codes, out)
	}
	// On Redis: the bucket is there.
	if n, err := srv.Client(t).Exists(ctx, "rls:{ratelimit|PATH=/productpage}").Result(); err != nil || n != 1 {
		t.Fatalf("the bucket is not in Redis: %d, %v", n, err)
	}
	if strings.Contains(out.String(), "level=WARN") {
		t.Errorf("warnings for Istio's environment:\n%s", out)
	}
}
