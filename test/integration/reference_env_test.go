package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/envoyflows"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testpki"
	"github.com/envoy-rls/envoy-rls/internal/xdstest"
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
	rl := startAsRatelimit(t, "::1",
		"LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr(), "USE_STATSD=false",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false")
	out := rl.out
	conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	// On Redis: the bucket is there, a fixed window as the reference counts.
	if n, err := srv.Client(t).Exists(ctx, "rls:{ratelimit|PATH=/productpage}|#fw1m").Result(); err != nil || n != 1 {
		keys, _ := srv.Client(t).Keys(ctx, "*").Result()
		t.Fatalf("the bucket is not in Redis: %d, %v; keys %q", n, err, keys)
	}
	if strings.Contains(out.String(), "level=WARN") {
		t.Errorf("warnings for Istio's environment:\n%s", out)
	}
}

// startAsRatelimit starts the binary as ratelimit, set by env, listening
// on host, and waits for GET /healthcheck to answer 200 OK.
func startAsRatelimit(t *testing.T, host string, env ...string) *process {
	t.Helper()
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(envoyRLS(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	httpPort, grpcPort := redistest.FreePort(t), redistest.FreePort(t)
	p := &process{cmd: exec.Command(ratelimit), out: &binarytest.Output{},
		grpcAddr: net.JoinHostPort(host, strconv.Itoa(grpcPort)), httpAddr: net.JoinHostPort(host, strconv.Itoa(httpPort))}
	p.cmd.Env = append(env, "HOST="+host, "GRPC_HOST="+host, "PORT="+strconv.Itoa(httpPort), "GRPC_PORT="+strconv.Itoa(grpcPort))
	if !slices.ContainsFunc(env, func(v string) bool {
		return strings.HasPrefix(v, "DEBUG_HOST=") || strings.HasPrefix(v, "DEBUG_PORT=") || strings.HasPrefix(v, "RLS_ADMIN_ADDR=")
	}) {
		// The admin address is 127.0.0.1:6070 by default: one port for
		// every test process at once. Off, unless a test asks for it.
		p.cmd.Env = append(p.cmd.Env, "RLS_ADMIN_ADDR=")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get("http://" + p.httpAddr + "/healthcheck")
		if err == nil {
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == http.StatusOK && string(body) == "OK" {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthcheck did not answer 200 OK within 10s (%v); output:\n%s", err, p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStartedAsEnvoyGateway starts the binary the way Envoy Gateway runs
// its rate-limit deployment: as ratelimit, set only by the reference's
// variables, with TLS on the gRPC port and to the xDS server (mutual), the
// config from xDS (an xDS server built from go-control-plane, as Envoy
// Gateway's), starting before it has one. A config pushed applies; a
// changed one applies; an invalid one is refused, the one in force kept.
func TestStartedAsEnvoyGateway(t *testing.T) {
	srv := redistest.Start(t)
	pki := testpki.New(t)
	serverTLS, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xds := xdstest.Start(t, lis, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverTLS}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})))

	// Its metrics: a statsd-exporter sidecar (a TCP listener here) on older
	// releases, USE_PROMETHEUS with a mapping file on newer ones; both on.
	statsd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer statsd.Close()
	statsdLines := make(chan string, 1000)
	go func() {
		c, err := statsd.Accept()
		if err != nil {
			return
		}
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			statsdLines <- sc.Text()
		}
	}()
	mapping := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(mapping, []byte(`mappings:
  - match: "ratelimit.service.rate_limit.*.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	_, statsdPort, _ := net.SplitHostPort(statsd.Addr().String())

	rl := startAsRatelimit(t, "127.0.0.1",
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+statsdPort, "STATS_FLUSH_INTERVAL=100ms",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+promAddr, "PROMETHEUS_MAPPER_YAML="+mapping,
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+xds.Addr, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+pki.ServerCert, "GRPC_SERVER_TLS_KEY="+pki.ServerKey, "GRPC_SERVER_TLS_CA_CERT="+pki.CACert,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+pki.ClientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+pki.ClientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+pki.CACert,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr())

	conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	// Envoy Gateway's descriptors: the route, then the rule's header match.
	const route = "httproute/default/backend/rule/0/match/0/*"
	req := &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: request([]string{route + "=" + route, "rule-0-match-0=one"}).Descriptors}
	limit := func(n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: route, Value: route, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "rule-0-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}}}}}
	}
	codesOf := func(n int) string {
		t.Helper()
		var got []string
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.ShouldRateLimit(ctx, req)
			cancel()
			if err != nil {
				t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, rl.out)
			}
			got = append(got, resp.GetOverallCode().String())
		}
		return strings.Join(got, " ")
	}
	// Before any config: every request is allowed.
	if got := codesOf(2); got != "OK OK" {
		t.Fatalf("before a config: %s", got)
	}
	const node = "envoy-ratelimit"
	xds.Set(t, node, "1", limit(1, rlsconfv3.RateLimitUnit_MINUTE))
	waitFor(t, rl, "the first config", func() bool { return codesOf(1) == "OVER_LIMIT" })
	// The reference's metrics saw the rejection: from StatsD, and scraped.
	waitFor(t, rl, "the over_limit stat", func() bool {
		for {
			select {
			case l := <-statsdLines:
				if strings.HasPrefix(l, "ratelimit.service.rate_limit.default/eg/http."+route+"_"+route+".rule-0-match-0.over_limit:") {
					return true
				}
			default:
				return false
			}
		}
	})
	r, err := http.Get("http://" + promAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if want := `ratelimit_service_rate_limit_over_limit{domain="default/eg/http",key1="` + route + "_" + route + `",key2="rule-0-match-0"}`; !strings.Contains(string(body), want) {
		t.Errorf("no %s in the scrape:\n%s", want, body)
	}
	xds.Set(t, node, "2", limit(1000, rlsconfv3.RateLimitUnit_MINUTE))
	waitFor(t, rl, "the changed config", func() bool { return codesOf(1) == "OK" })
	xds.Set(t, node, "3", limit(1, rlsconfv3.RateLimitUnit_UNKNOWN))
	waitFor(t, rl, "the refusal", func() bool { return xds.Nacks() > 0 })
	if got := codesOf(3); got != "OK OK OK" {
		t.Fatalf("after an invalid config: %s, want the config in force (1000 a minute) kept", got)
	}
	if !strings.Contains(rl.out.String(), "update refused") {
		t.Errorf("no log of the refusal:\n%s", rl.out)
	}

	// A cost.response rule's calls (1000 a minute in force): a check, then
	// the response's cost of 1500 at stream end, recorded past the limit as
	// the reference records it: the next check is refused, with no header
	// (Envoy Gateway's Envoy adds its own).
	envoyflows.AwayFromMinuteEdge(3 * time.Second)
	costOf := func(hits uint64) *rlsv3.RateLimitRequest {
		r := &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: request([]string{route + "=" + route, "rule-0-match-0=two"}).Descriptors}
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		return r
	}
	var got []string
	for _, hits := range []uint64{0, 1500, 0} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, costOf(hits))
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, rl.out)
		}
		if len(resp.GetResponseHeadersToAdd()) > 0 {
			t.Errorf("headers %v, want none as the reference", resp.GetResponseHeadersToAdd())
		}
		got = append(got, resp.GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("check, cost of 1500, check at 1000 a minute: %v, want the last check refused", got)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, p *process, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not apply within 10s; output:\n%s", what, p.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
