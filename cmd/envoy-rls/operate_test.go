package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/testpki"
)

// server is envoy-rls serve running in-process.
type server struct {
	grpcAddr, httpAddr string
	adminAddr          string
	stderr             *binarytest.Output
	cancel             context.CancelFunc
	exit               chan int
}

// startServe runs serve with args on loopback ports and waits until it
// listens.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	return startServeWith(t, net.Listen, args...)
}

// startServeWith is startServe listening through listen.
func startServeWith(t *testing.T, listen func(network, addr string) (net.Listener, error), args ...string) *server {
	t.Helper()
	s := &server{stderr: &binarytest.Output{}, exit: make(chan int, 1)}
	a := &app{stdout: io.Discard, stderr: s.stderr, listen: listen, lookupEnv: func(string) (string, bool) { return "", false }}
	addrs := make(chan listenAddrs, 1)
	a.ready = func(l listenAddrs) { addrs <- l }
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		s.exit <- a.run(ctx, append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, args...))
	}()
	select {
	case got := <-addrs:
		s.grpcAddr, s.httpAddr = got.grpc.String(), got.http.String()
		if got.admin != nil {
			s.adminAddr = got.admin.String()
		}
	case code := <-s.exit:
		t.Fatalf("serve exited with %d:\n%s", code, s.stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start within 10s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.exit:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop within 10s")
		}
	})
	return s
}

func (s *server) client(t *testing.T, opts ...grpc.DialOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(s.grpcAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func rateRequest(domain string, pairs ...string) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

func code(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.GetOverallCode()
}

// httpGet returns the status and body of a GET.
// get asks the HTTP address for path.
func (s *server) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return httpGet(t, "http://"+s.httpAddr+path)
}

// admin asks the admin address for path.
func (s *server) admin(t *testing.T, path string) (int, string) {
	t.Helper()
	return httpGet(t, "http://"+s.adminAddr+path)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// metric returns the value of one series of /metrics, or -1.
func (s *server) metric(t *testing.T, series string) float64 {
	t.Helper()
	_, body := s.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// writeConfigMap puts content in dir as a Kubernetes ConfigMap volume
// update does: a new timestamped directory, and ..data swapped to it.
func writeConfigMap(t *testing.T, dir, content string) {
	t.Helper()
	version, err := os.MkdirTemp(dir, "..20")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(version, "api.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "api.yaml")); os.IsNotExist(err) {
		if err := os.Symlink("..data/api.yaml", filepath.Join(dir, "api.yaml")); err != nil {
			t.Fatal(err)
		}
	}
}

func limitConfig(size int) string {
	return fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: %d, drip_rate: 1h}\n", size)
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConfigReload(t *testing.T) {
	dir := t.TempDir()
	writeConfigMap(t, dir, limitConfig(1))
	s := startServe(t, "-config", dir)
	c := s.client(t)

	code(t, c, rateRequest("api", "user=a"))
	if got := code(t, c, rateRequest("api", "user=a")); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call with a bucket of 1: %v", got)
	}

	// A ConfigMap update is picked up: a bucket of 3 has room again.
	writeConfigMap(t, dir, limitConfig(3))
	eventually(t, "the new config in force", func() bool {
		return code(t, c, rateRequest("api", "user=b")) == rlsv3.RateLimitResponse_OK &&
			s.metric(t, `envoy_rls_config_reloads_total{result="success"}`) >= 1
	})
	if got := code(t, c, rateRequest("api", "user=a")); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("user a after the bucket grew to 3: %v", got)
	}

	// An invalid update is refused, counted and logged with file:line; the
	// config in force stays.
	writeConfigMap(t, dir, "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: -1, drip_rate: 1h}\n")
	eventually(t, "the failed reload counted", func() bool {
		return s.metric(t, `envoy_rls_config_reloads_total{result="failure"}`) == 1
	})
	if !strings.Contains(s.stderr.String(), "api.yaml:4: descriptors[0].leaky_bucket.size: must be between 0") {
		t.Fatalf("the invalid config is not logged with its line:\n%s", s.stderr)
	}
	if _, body := s.admin(t, "/config"); !strings.Contains(body, `"size": 3`) {
		t.Fatalf("/config after a failed reload:\n%s", body)
	}

	// SIGHUP reloads too.
	writeConfigMap(t, dir, limitConfig(7))
	eventually(t, "the fixed config in force", func() bool { _, body := s.admin(t, "/config"); return strings.Contains(body, `"size": 7`) })
	successes := s.metric(t, `envoy_rls_config_reloads_total{result="success"}`)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SIGHUP reloaded", func() bool {
		return s.metric(t, `envoy_rls_config_reloads_total{result="success"}`) > successes
	})
}

// TestReloadUnderLoad swaps the config 8 times while calls go on: no call
// fails or is lost.
func TestReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	writeConfigMap(t, dir, limitConfig(1000000))
	s := startServe(t, "-config", dir)
	c := s.client(t)
	var calls, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.ShouldRateLimit(ctx, rateRequest("api", fmt.Sprintf("user=%d-%d", w, i)))
				cancel()
				calls.Add(1)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 {
					failures.Add(1)
				}
			}
		})
	}
	for i := range 8 {
		writeConfigMap(t, dir, limitConfig(1000000+i))
		time.Sleep(300 * time.Millisecond) // past the watch's debounce: one reload each
	}
	eventually(t, "reloads happened", func() bool {
		return s.metric(t, `envoy_rls_config_reloads_total{result="success"}`) >= 6
	})
	close(stop)
	wg.Wait()
	if failures.Load() != 0 || calls.Load() < 100 {
		t.Fatalf("%d of %d calls failed during reloads", failures.Load(), calls.Load())
	}
}

func TestMetricsJSONAndConfigEndpoints(t *testing.T) {
	s := startServe(t, "-config", "../../config")
	c := s.client(t)
	for range 6 {
		code(t, c, rateRequest("api", "user=alice", "action=trade"))
	}
	code(t, c, rateRequest("nope", "user=alice"))
	for series, want := range map[string]float64{
		`envoy_rls_calls_total{code="OK",domain="api"}`:                                               5,
		`envoy_rls_calls_total{code="OVER_LIMIT",domain="api"}`:                                       1,
		`envoy_rls_calls_total{code="OK",domain="(unknown)"}`:                                         1,
		`envoy_rls_limit_decisions_total{decision="admitted",domain="api",limit="trades_per_user"}`:   5,
		`envoy_rls_limit_decisions_total{decision="over_limit",domain="api",limit="trades_per_user"}`: 1,
		`envoy_rls_limit_decisions_total{decision="near_limit",domain="api",limit="trades_per_user"}`: 1,
		`envoy_rls_limit_decisions_total{decision="admitted",domain="api",limit="user"}`:              6,
		`envoy_rls_store_duration_seconds_count{operation="apply",store="memory"}`:                    6,
		`envoy_rls_call_duration_seconds_count{code="OK"}`:                                            6,
		`envoy_rls_call_duration_seconds_count{code="OVER_LIMIT"}`:                                    1,
		`envoy_rls_memory_buckets`: 2,
		fmt.Sprintf(`envoy_rls_build_info{goversion=%q,version=%q}`, runtime.Version(), version()): 1,
	} {
		if got := s.metric(t, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	post := func(body string) (int, http.Header, string) {
		r, err := http.Post("http://"+s.httpAddr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, r.Header, string(b)
	}
	req := `{"domain": "api", "descriptors": [{"entries": [{"key": "client", "value": "%s"}]}]}`
	if st, h, body := post(fmt.Sprintf(req, "someone")); st != 200 || !strings.Contains(body, `"overallCode":"OK"`) || h.Get("Content-Type") != "application/json" {
		t.Errorf("/json OK: %d %s", st, body)
	}
	if st, h, body := post(fmt.Sprintf(req, "abuser")); st != 429 || !strings.Contains(body, `"OVER_LIMIT"`) || h.Get("Retry-After") != "1" {
		t.Errorf("/json over the limit: %d %v %s", st, h, body)
	}
	for _, bad := range []string{`{"domain": "api"}`, `not json`, `{"domain": "api", "descriptors": [{"entries": [{"key": ""}]}]}`, `{"domian": "api"}`} {
		if st, _, body := post(bad); st != 400 || !strings.Contains(body, `"error"`) {
			t.Errorf("/json with %s: %d %s, want 400 with a message", bad, st, body)
		}
	}

	st, body := s.admin(t, "/config")
	var cfg struct {
		Domains []struct {
			Domain      string            `json:"domain"`
			Descriptors []json.RawMessage `json:"descriptors"`
		} `json:"domains"`
	}
	if err := json.Unmarshal([]byte(body), &cfg); st != 200 || err != nil || len(cfg.Domains) != 2 || cfg.Domains[0].Domain != "api" || len(cfg.Domains[0].Descriptors) != 5 || cfg.Domains[1].Domain != "search" {
		t.Errorf("/config: %d %v\n%s", st, err, body)
	}
}

// TestShutdownDrains: from SIGTERM on, health says NOT_SERVING while calls
// are still answered during -shutdown-delay; then the server stops.
func TestShutdownDrains(t *testing.T) {
	s := startServe(t, "-config", "../../config", "-shutdown-delay", "1s")
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	code(t, c, rateRequest("api", "user=a"))
	start := time.Now()
	s.cancel() // as SIGTERM does
	eventually(t, "NOT_SERVING after SIGTERM", func() bool {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if st, _ := s.get(t, "/readyz"); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503", st)
	}
	if st, _ := s.get(t, "/healthcheck"); st != http.StatusInternalServerError {
		t.Errorf("/healthcheck while draining: %d, want 500, as envoyproxy/ratelimit", st)
	}
	if got := code(t, c, rateRequest("api", "user=a")); got != rlsv3.RateLimitResponse_OK || time.Since(start) > time.Second {
		t.Fatalf("a call while draining: %v after %s", got, time.Since(start))
	}
	select {
	case got := <-s.exit:
		s.exit <- got // for the cleanup
		if time.Since(start) < time.Second {
			t.Fatalf("stopped after %s, before the 1s shutdown delay", time.Since(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
}

func TestMutualTLS(t *testing.T) {
	pki := testpki.New(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, pki.ServerCert, cert)
	copyFile(t, pki.ServerKey, key)
	s := startServe(t, "-config", "../../config", "-grpc-tls-cert", cert, "-grpc-tls-key", key, "-grpc-tls-client-ca", pki.CACert)

	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(pki.CACert)
	roots.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := s.client(t, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}})))
	if got := code(t, withCert, rateRequest("api", "user=a")); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("client with a certificate: %v", got)
	}
	withoutCert := s.client(t, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := withoutCert.ShouldRateLimit(ctx, rateRequest("api", "user=a")); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	plain := s.client(t)
	if _, err := plain.ShouldRateLimit(ctx, rateRequest("api", "user=a")); err == nil {
		t.Fatal("a plaintext client was served")
	}

	// A renewed certificate is served without a restart.
	other := testpki.New(t)
	copyFile(t, other.ServerCert, cert)
	copyFile(t, other.ServerKey, key)
	eventually(t, "the new certificate served", func() bool {
		conn, err := tls.Dial("tcp", s.grpcAddr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{clientCert}, NextProtos: []string{"h2"}})
		if err != nil {
			return false
		}
		defer conn.Close()
		served := conn.ConnectionState().PeerCertificates[0].Raw
		renewed, _ := tls.LoadX509KeyPair(other.ServerCert, other.ServerKey)
		return bytes.Equal(served, renewed.Certificate[0])
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	// Write and rename, as a certificate manager does.
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

func TestHealthcheck(t *testing.T) {
	run := func(env map[string]string, args ...string) (int, string) {
		a, stdout, stderr := testApp(env)
		code := a.run(context.Background(), append([]string{"healthcheck"}, args...))
		return code, stdout.String() + stderr.String()
	}
	s := startServe(t, "-config", "../../config")
	if code, out := run(map[string]string{"RLS_GRPC_ADDR": s.grpcAddr}); code != exitOK || !strings.Contains(out, "SERVING") {
		t.Fatalf("healthcheck of a serving server: exit %d, %s", code, out)
	}
	if code, out := run(nil, "-grpc-addr", "127.0.0.1:1", "-timeout", "200ms"); code != exitError {
		t.Fatalf("healthcheck with nothing listening: exit %d, %s", code, out)
	}

	pki := testpki.New(t)
	tlsServer := startServe(t, "-config", "../../config", "-grpc-tls-cert", pki.ServerCert, "-grpc-tls-key", pki.ServerKey, "-grpc-tls-client-ca", pki.CACert)
	env := map[string]string{"RLS_GRPC_ADDR": tlsServer.grpcAddr, "RLS_GRPC_TLS_CERT": pki.ServerCert}
	if code, out := run(env, "-tls-client-cert", pki.ClientCert, "-tls-client-key", pki.ClientKey); code != exitOK {
		t.Fatalf("healthcheck over mutual TLS: exit %d, %s", code, out)
	}
	if code, _ := run(env, "-timeout", "500ms"); code != exitError {
		t.Fatal("healthcheck without the client certificate the server requires passed")
	}
	// As a container's HEALTHCHECK runs it: everything from the environment.
	env["RLS_TLS_CLIENT_CERT"], env["RLS_TLS_CLIENT_KEY"] = pki.ClientCert, pki.ClientKey
	if code, out := run(env); code != exitOK {
		t.Fatalf("healthcheck over mutual TLS, certificate from RLS_TLS_CLIENT_*: exit %d, %s", code, out)
	}
	if code, _ := run(map[string]string{"RLS_TIMEOUT": "soon"}); code != exitUsage {
		t.Errorf("RLS_TIMEOUT=soon: exit %d, want %d", code, exitUsage)
	}
}

// failingListener accepts nothing: its Accept fails once closed is.
type failingListener struct {
	net.Listener
	fail chan struct{}
}

func (l failingListener) Accept() (net.Conn, error) {
	<-l.fail
	return nil, errors.New("the listener broke")
}

func TestServeExitsWhenAServerFails(t *testing.T) {
	a, _, stderr := testApp(nil)
	fail := make(chan struct{})
	a.listen = func(network, addr string) (net.Listener, error) {
		l, err := net.Listen(network, addr)
		return failingListener{l, fail}, err
	}
	a.ready = func(listenAddrs) { close(fail) }
	exit := make(chan int, 1)
	go func() {
		exit <- a.run(context.Background(), []string{"-config", "../../config", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-admin-addr", ""})
	}()
	select {
	case code := <-exit:
		if code != exitError {
			t.Errorf("exit %d, want %d", code, exitError)
		}
		if !strings.Contains(stderr.String(), "server failed") {
			t.Errorf("stderr lacks the failure:\n%s", stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return within 10s after its server failed")
	}
}

// TestRateLimitAlgorithmFlag: -rate-limit-algorithm reaches the config the
// service loads: the default config's rate_limit blocks become fixed
// windows, while its leaky buckets stay.
func TestRateLimitAlgorithmFlag(t *testing.T) {
	s := startServe(t, "-config", "../../config", "-rate-limit-algorithm", "fixed_window")
	st, body := s.admin(t, "/config")
	if st != 200 || !strings.Contains(body, `"value": "read",
              "limit": {
                "algorithm": "fixed_window",
                "limit": 100,
                "window": "1m0s",`) || !strings.Contains(body, `"algorithm": "leaky_bucket"`) {
		t.Fatalf("/config: %d\n%s", st, body)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestMaxConnectionAge: past -grpc-max-connection-age the server closes a
// client's connection, and the client's next call comes on a new one, which
// a new replica behind a load balancer could have taken.
func TestMaxConnectionAge(t *testing.T) {
	var grpcLis *countingListener
	listen := func(network, addr string) (net.Listener, error) {
		l, err := net.Listen(network, addr)
		if err == nil && grpcLis == nil {
			grpcLis = &countingListener{Listener: l} // the first is gRPC's
			return grpcLis, nil
		}
		return l, err
	}
	s := startServeWith(t, listen, "-config", "../../config", "-grpc-max-connection-age", "300ms", "-grpc-max-connection-age-grace", "100ms")
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	code(t, c, rateRequest("api", "user=a"))
	time.Sleep(time.Second)
	code(t, c, rateRequest("api", "user=a"))
	if n := grpcLis.accepted.Load(); n < 2 {
		t.Fatalf("%d connections accepted for two calls a second apart, want 2: the first was not closed at its age", n)
	}
}
