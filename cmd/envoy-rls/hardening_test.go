package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testpki"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

func TestAdminPort(t *testing.T) {
	off := startServe(t, "-config", "../../config")
	if code, body := off.admin(t, "/config"); code != http.StatusOK || !strings.Contains(body, `"domain"`) {
		t.Errorf("admin /config: %d\n%s", code, body)
	}
	if code, _ := off.get(t, "/config"); code != http.StatusNotFound {
		t.Errorf("/config on the HTTP address: %d, want 404 (it is on the admin address)", code)
	}
	if code, _ := off.admin(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("without -pprof: /debug/pprof/ answers %d, want 404", code)
	}

	on := startServe(t, "-config", "../../config", "-pprof")
	for path, want := range map[string]int{
		"/debug/pprof/":          http.StatusOK,
		"/debug/pprof/heap":      http.StatusOK,
		"/debug/pprof/goroutine": http.StatusOK,
		// The command line may hold a Redis password (-redis-url).
		"/debug/pprof/cmdline": http.StatusNotFound,
	} {
		if code, _ := on.admin(t, path); code != want {
			t.Errorf("with -pprof: admin %s answers %d, want %d", path, code, want)
		}
	}
	if code, body := on.admin(t, "/debug/pprof/"); strings.Contains(body, "cmdline") {
		t.Errorf("the profile index links cmdline (%d):\n%s", code, body)
	}
	if code, _ := on.get(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("with -pprof: /debug/pprof/ on the HTTP address answers %d, want 404", code)
	}

	none := startServe(t, "-config", "../../config", "-admin-addr", "")
	if none.adminAddr != "" {
		t.Errorf("-admin-addr \"\" still listens on %s", none.adminAddr)
	}
	a, _, stderr := testApp(nil)
	if code := a.run(context.Background(), []string{"-admin-addr", "", "-pprof"}); code != exitUsage || !strings.Contains(stderr.String(), "-pprof serves on the admin address") {
		t.Errorf("-pprof without an admin address: exit %d\n%s", code, stderr)
	}
}

func postJSON(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	r, err := http.Post("http://"+addr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

const jsonRequest = `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}`

// TestJSONNoWeakerThanGRPC: where gRPC requires client certificates, /json
// (which checks none) is off unless asked for.
func TestJSONNoWeakerThanGRPC(t *testing.T) {
	pki := testpki.New(t)
	mtls := []string{"-config", "../../config", "-grpc-tls-cert", pki.ServerCert, "-grpc-tls-key", pki.ServerKey, "-grpc-tls-client-ca", pki.CACert}
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"plain gRPC", []string{"-config", "../../config"}, http.StatusOK},
		{"plain gRPC, -http-json=false", []string{"-config", "../../config", "-http-json=false"}, http.StatusNotFound},
		{"mutual TLS", mtls, http.StatusNotFound},
		{"mutual TLS, -http-json=true", append(mtls, "-http-json=true"), http.StatusOK},
		{"mutual TLS, -http-json", append(mtls, "-http-json"), http.StatusOK},
	} {
		s := startServe(t, c.args...)
		if code, body := postJSON(t, s.httpAddr, jsonRequest); code != c.want {
			t.Errorf("%s: POST /json answers %d, want %d\n%s", c.name, code, c.want, body)
		}
	}
}

func TestHTTPLimits(t *testing.T) {
	s := startServe(t, "-config", "../../config")

	big := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "` + strings.Repeat("a", 1<<20) + `"}]}]}`
	if code, body := postJSON(t, s.httpAddr, big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over 1 MiB: %d, want 413\n%.200s", code, body)
	}

	req, _ := http.NewRequest("GET", "http://"+s.httpAddr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 64<<10))
	if r, err := http.DefaultClient.Do(req); err != nil {
		t.Errorf("a 64 KiB header: %v", err)
	} else if r.Body.Close(); r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 64 KiB header: %d, want 431", r.StatusCode)
	}

	// Half a request: the server hangs up once the header timeout passes,
	// instead of holding the connection forever.
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(httpReadHeaderTimeout + 5*time.Second))
	_, err = bufio.NewReader(c).ReadString('\n') // a 408 or EOF: either way, closed
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("half a request still held open after %s", time.Since(start))
	}
	if took := time.Since(start); took < httpReadHeaderTimeout-time.Second {
		t.Errorf("half a request cut after %s, before the header timeout %s", took, httpReadHeaderTimeout)
	}
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "256MiB": 256 << 20, "1GiB": 1 << 30, "64 KiB": 64 << 10, "1GB": 1e9, "10MB": 10e6, "5B": 5,
	} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("%q: %d %v, want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "ten", "1XB", "9999999TiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("%q: accepted as %d", in, b)
		}
	}
	if b := byteSize(256 << 20); b.String() != "256MiB" {
		t.Errorf("String: %s", b.String())
	}
}

func TestHardeningFlags(t *testing.T) {
	env := map[string]string{"RLS_MEMORY_MAX_BYTES": "64MiB", "RLS_HTTP_JSON": "false"}
	s, err := parseFlags([]string{"-max-descriptors", "8"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.memoryMaxBytes != 64<<20 || s.maxDescriptors != 8 || s.httpJSON.or(true) || s.maxEntries != 32 || s.maxEntryBytes != 4096 {
		t.Errorf("got %+v", s)
	}
	for _, args := range [][]string{
		{"-memory-max-bytes", "1KiB"}, {"-max-descriptors", "0"}, {"-max-entries", "-1"}, {"-http-json=maybe"},
	} {
		if _, err := parseFlags(args, func(string) (string, bool) { return "", false }, io.Discard, false); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestChoiceFlags(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	s, err := parseFlags([]string{"-store", "redis", "-failure-mode", "local", "-response-headers", "envoy",
		"-log-format", "json", "-log-level", "debug", "-redis-mode", "transactions"}, noEnv, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.store.value != redisStore || s.failureMode.value != failLocal || s.responseHeaders.value != rls.EnvoyHeaders ||
		s.logFormat.value != jsonLogs || s.logLevel.value != slog.LevelDebug || s.redisMode.value != redis.TransactionsMode {
		t.Errorf("got %+v", s)
	}
	if got := s.failureMode.String(); got != "local" {
		t.Errorf("String: %q", got)
	}
	d, _ := parseFlags(nil, noEnv, io.Discard, false)
	if d.store.value != memoryStore || d.failureMode.value != failUnavailable || d.responseHeaders.value != rls.LeakyHeaders || d.logLevel.value != slog.LevelInfo {
		t.Errorf("defaults: %+v", d)
	}
	if _, err := parseFlags([]string{"-failure-mode", "local"}, noEnv, io.Discard, false); err == nil || !strings.Contains(err.Error(), "needs -store redis") {
		t.Errorf("-failure-mode local on the memory store: %v", err)
	}
	if i, err := parseFlags([]string{"-response-headers", "ietf"}, noEnv, io.Discard, false); err != nil || i.responseHeaders.value != rls.IETFHeaders {
		t.Errorf("-response-headers ietf: %v", err)
	}
	if _, err := parseFlags([]string{"-failure-mode", "maybe"}, noEnv, io.Discard, false); err == nil || !strings.Contains(err.Error(), "want unavailable, allow, deny or local") {
		t.Errorf("-failure-mode maybe: %v", err)
	}
	for m, want := range map[failureMode]rls.FailureMode{failUnavailable: rls.FailUnavailable, failAllow: rls.FailAllow, failDeny: rls.FailDeny, failLocal: rls.FailUnavailable} {
		if got := m.service(); got != want {
			t.Errorf("%v.service() = %v, want %v", m, got, want)
		}
	}
}
