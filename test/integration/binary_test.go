package integration

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// envoyRLS returns the path of the envoy-rls binary, built once per run.
func envoyRLS(t *testing.T) string { return binarytest.Build(t, "../..") }

// process is the real binary running.
type process struct {
	cmd                *exec.Cmd
	out                *binarytest.Output
	grpcAddr, httpAddr string
	adminAddr          string // "" when off
}

// startBinary starts the binary with the repository's default config, no
// admin port, and args after those (a later flag wins).
func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	return launch(t, "", "", append([]string{"-config", "../../config"}, args...)...)
}

// launch starts the binary serving gRPC on grpcAddr (a free loopback port
// if ""), HTTP on a free port and the admin endpoints on adminAddr (none if
// ""), with args after those, and waits until it listens.
func launch(t *testing.T, grpcAddr, adminAddr string, args ...string) *process {
	t.Helper()
	if grpcAddr == "" {
		grpcAddr = "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	}
	p := &process{
		out:       &binarytest.Output{},
		grpcAddr:  grpcAddr,
		httpAddr:  "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		adminAddr: adminAddr,
	}
	p.cmd = exec.Command(envoyRLS(t), append([]string{"-grpc-addr", p.grpcAddr, "-http-addr", p.httpAddr, "-admin-addr", adminAddr}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", p.grpcAddr, 100*time.Millisecond); err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy-rls did not listen on %s within 10s; output:\n%s", p.grpcAddr, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM (which drains, and sends the spans not sent yet) and
// waits for the exit, failing the test on an error exit or one later than
// 15 s.
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; output:\n%s", err, p.out)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("envoy-rls did not exit within 15s of SIGTERM; output:\n%s", p.out)
	}
}

// TestStartsWithoutRedis starts the binary with Redis not running: it
// serves, says NOT_SERVING and answers Unavailable, then turns SERVING and
// answers once Redis is up.
func TestStartsWithoutRedis(t *testing.T) {
	srv := redistest.New(t) // not started yet
	p := startBinary(t, "-store", "redis", "-redis-url", srv.URL())
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return resp.GetStatus()
	}
	readyz := func() int {
		r, err := http.Get("http://" + p.httpAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := rls.ShouldRateLimit(ctx, request([]string{"user=alice", "action=trade"}))
		return err
	}

	if st := check(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health with Redis down: %v, want NOT_SERVING", st)
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with Redis down: %d, want 503", code)
	}
	if err := call(); status.Code(err) != codes.Unavailable {
		t.Fatalf("call with Redis down: %v, want Unavailable", err)
	}

	srv.Restart()
	up := time.Now()
	for check() != healthpb.HealthCheckResponse_SERVING {
		if time.Since(up) > 3*time.Second {
			t.Fatalf("still NOT_SERVING 3s after Redis started; output:\n%s", p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := call(); err != nil {
		t.Fatalf("call with Redis up: %v", err)
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz with Redis up: %d, want 200", code)
	}

	p.stop(t)
}

// quietRedis drops go-redis's own log lines (a refused dial per call while
// a fault test has a node down): the tests check what callers see.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	goredis.SetLogger(quietRedis{})
	code := m.Run()
	binarytest.Remove()
	os.Exit(code)
}
