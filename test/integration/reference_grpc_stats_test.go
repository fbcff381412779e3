package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/statsdtest"
	"github.com/envoy-rls/envoy-rls/internal/testpki"
)

// referenceEnv is the environment of a ratelimit on srv with a config of
// domain rl (user: 100 a minute), where RUNTIME_* put it.
func referenceEnv(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	config := "domain: rl\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n"
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr()}
}

// callRL makes one call for user=alice on domain rl.
func callRL(conn *grpc.ClientConn) (rlsv3.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: request([]string{"user=alice"}).Descriptors}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	return resp.GetOverallCode(), err
}

// TestRatelimitOnUnixSocket: started as ratelimit with GRPC_UDS, gRPC is
// served on the socket (calls and health), not on GRPC_HOST:GRPC_PORT,
// and the socket file is gone after SIGTERM.
func TestRatelimitOnUnixSocket(t *testing.T) {
	srv := redistest.Start(t)
	dir, err := os.MkdirTemp("", "rls") // short: a socket's path is at most ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "ratelimit.sock")
	rl := startAsRatelimit(t, "127.0.0.1", append(referenceEnv(t, srv), "USE_STATSD=false", "GRPC_UDS="+sock)...)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got, err := callRL(conn); err != nil || got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a call over the socket: %v, %v; output:\n%s", got, err, rl.out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health over the socket: %v, %v", h, err)
	}
	if c, err := net.DialTimeout("tcp", rl.grpcAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("gRPC is served on GRPC_HOST:GRPC_PORT (%s) too", rl.grpcAddr)
	}
	if err := rl.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := rl.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; output:\n%s", err, rl.out)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket file is still there after SIGTERM: %v", err)
	}
}

// TestRatelimitClientSAN: started as ratelimit with client certificates
// required and GRPC_CLIENT_TLS_SAN, a client whose certificate holds the
// name gets answers; one whose certificate, signed by the same CA, does
// not is refused.
func TestRatelimitClientSAN(t *testing.T) {
	srv := redistest.Start(t)
	pki := testpki.New(t)
	rl := startAsRatelimit(t, "127.0.0.1", append(referenceEnv(t, srv), "USE_STATSD=false",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+pki.ServerCert, "GRPC_SERVER_TLS_KEY="+pki.ServerKey,
		"GRPC_CLIENT_TLS_CACERT="+pki.CACert, "GRPC_CLIENT_TLS_SAN=envoy.edge.svc")...)
	caPEM, err := os.ReadFile(pki.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	dial := func(certFile, keyFile string) *grpc.ClientConn {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	if got, err := callRL(dial(pki.IssueClient(t, "envoy.edge.svc"))); err != nil || got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a client with the SAN: %v, %v; output:\n%s", got, err, rl.out)
	}
	if got, err := callRL(dial(pki.ClientCert, pki.ClientKey)); err == nil {
		t.Fatalf("a client without the SAN was answered: %v", got)
	}
}

// TestRatelimitDogStatsD: started as ratelimit with USE_STATSD=false,
// USE_DOG_STATSD=true, EXTRA_TAGS and a mogrifier, a call's stats arrive
// over UDP as DogStatsD, tagged, the per-limit names rewritten by the
// mogrifier into a name and tags.
func TestRatelimitDogStatsD(t *testing.T) {
	srv := redistest.Start(t)
	addr, lines := statsdtest.ListenUDP(t, 1000)
	_, port, _ := net.SplitHostPort(addr)
	rl := startAsRatelimit(t, "127.0.0.1", append(referenceEnv(t, srv),
		"USE_STATSD=false", "USE_DOG_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+port, "STATS_FLUSH_INTERVAL=100ms",
		"EXTRA_TAGS=team:edge", "USE_DOG_STATSD_MOGRIFIERS=hits",
		`DOG_STATSD_MOGRIFIER_HITS_PATTERN=^ratelimit\.service\.rate_limit\.([^.]*)\.(.*)\.(total_hits)$`,
		"DOG_STATSD_MOGRIFIER_HITS_NAME=ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS=domain:$1,descriptor:$2")...)
	conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got, err := callRL(conn); err != nil || got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a call: %v, %v; output:\n%s", got, err, rl.out)
	}
	want := map[string]bool{
		"ratelimit.service.rate_limit.total_hits:1|c|#team:edge,domain:rl,descriptor:user": false,
		"ratelimit.service.rate_limit.rl.user.within_limit:1|c|#team:edge":                 false,
		"ratelimit_server.ShouldRateLimit.total_requests:1|c|#team:edge":                   false,
	}
	var got []string
	deadline := time.After(10 * time.Second)
	for missing := len(want); missing > 0; {
		select {
		case l := <-lines:
			got = append(got, l)
			if seen, ok := want[l]; ok && !seen {
				want[l] = true
				missing--
			}
		case <-deadline:
			t.Fatalf("within 10s, got:\n%s\nwant among them: %v; output:\n%s", strings.Join(got, "\n"), want, rl.out)
		}
	}
}
