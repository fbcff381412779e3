package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// testApp returns an app with captured output and the given environment.
func testApp(env map[string]string) (*app, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &app{
		stdout: &stdout,
		stderr: &stderr,
		listen: net.Listen,
		lookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		environ: func() []string {
			var kv []string
			for k, v := range env {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
	}, &stdout, &stderr
}

func TestCheckConfigAcceptsTheDefaultConfig(t *testing.T) {
	a, stdout, stderr := testApp(nil)
	if code := a.run(context.Background(), []string{"check-config", "../../config"}); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout.String(), "valid: 2 domain(s), 9 limit(s) in 2 file(s)") {
		t.Fatalf("stdout: %s", stdout)
	}
	if stderr.Len() != 0 {
		t.Fatalf("the default config has warnings:\n%s", stderr)
	}
}

// TestCheckConfigRejectsBadConfigs runs check-config on every file of
// testdata/bad; each names, on its first line, the message it must cause.
func TestCheckConfigRejectsBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) < 14 {
		t.Fatalf("found %d bad configs (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := wantLine(t, f)
			a, _, stderr := testApp(nil)
			if code := a.run(context.Background(), []string{"check-config", f}); code != exitError {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitError, stderr)
			}
			if !strings.Contains(stderr.String(), "testdata/bad/"+want) {
				t.Fatalf("stderr:\n%s\nwant a line with:\n%s", stderr, want)
			}
		})
	}
}

// wantLine returns what follows "# want: " on the file's first line.
func wantLine(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first, _ := bufio.NewReader(f).ReadString('\n')
	want, ok := strings.CutPrefix(strings.TrimSpace(first), "# want: ")
	if !ok {
		t.Fatalf("%s: first line is not a # want: comment", file)
	}
	return want
}

func TestCheckConfigAcceptsEnvoyproxyRatelimitFiles(t *testing.T) {
	a, stdout, stderr := testApp(nil)
	if code := a.run(context.Background(), []string{"check-config", "testdata/envoyproxy"}); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout.String(), "valid: 2 domain(s)") {
		t.Fatalf("stdout: %s", stdout)
	}
	for _, field := range []string{"quota_mode", "metadata"} {
		if strings.Contains(stderr.String(), "."+field+":") {
			t.Errorf("a warning about %s, which is read:\n%s", field, stderr)
		}
	}
}

func TestCommandLineErrors(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"check-config"}, nil, exitUsage, "Usage: envoy-rls check-config [-rate-limit-algorithm NAME] [-charge admitted|always] [-match all|leaf] [-merge-domains] [-config-dotfiles] PATH"},
		{[]string{"check-config", "a", "b"}, nil, exitUsage, "Usage"},
		{[]string{"check-config", "does-not-exist"}, nil, exitError, "does-not-exist: no such file or directory"},
		{[]string{"frobnicate"}, nil, exitUsage, `unknown command "frobnicate"`},
		{[]string{"check-config", "-rate-limit-algorithm", "token_bucket", "../../config"}, nil, exitUsage,
			`invalid value "token_bucket" for flag -rate-limit-algorithm: want leaky_bucket, sliding_window or fixed_window`},
		{nil, map[string]string{"RLS_RATE_LIMIT_ALGORITHM": "gcra"}, exitUsage, `RLS_RATE_LIMIT_ALGORITHM="gcra": want leaky_bucket, sliding_window or fixed_window`},
		{[]string{"-store", "etcd"}, nil, exitUsage, `invalid value "etcd" for flag -store: want memory, redis or memcached`},
		{[]string{"-no-such-flag"}, nil, exitUsage, "flag provided but not defined: -no-such-flag"},
		{nil, map[string]string{"RLS_MEMORY_MAX_BUCKETS": "many"}, exitUsage, `RLS_MEMORY_MAX_BUCKETS="many"`},
		{nil, map[string]string{"RLS_LOG_LEVEL": "loud"}, exitUsage, `RLS_LOG_LEVEL="loud": want debug, info, warn or error`},
		{[]string{"serve", "extra"}, nil, exitUsage, `unexpected argument "extra"`},
		{[]string{"-config", "testdata/bad/bad-unit.yaml"}, nil, exitError, `bad-unit.yaml:6: descriptors[0].rate_limit.unit: unknown unit`},
		{[]string{"-store", "redis", "-config", "../../config", "-redis-url", "http://user:secret@localhost"}, nil, exitError,
			"redis URL http://user:xxxxx@localhost: the scheme must be redis://, rediss://"},
		{[]string{"-store", "redis", "-config", "../../config", "-redis-tls-ca", "ca.pem"}, nil, exitError,
			"TLS certificate files need a rediss:// URL"},
		{[]string{"-redis-mode", "lua"}, nil, exitUsage, `invalid value "lua" for flag -redis-mode: want script or transactions`},
		{[]string{"-redis-pipeline-limit", "-1"}, nil, exitUsage, `-redis-pipeline-limit: must be 0 or more, got -1`},
		{nil, map[string]string{"RLS_REDIS_PIPELINE_WINDOW": "-1ms"}, exitUsage, `-redis-pipeline-window: must not be negative, got -1ms`},
		{[]string{"-store", "redis", "-config", "../../config", "-redis-sentinel-master", "m"}, nil, exitError,
			"the sentinels' addresses are required"},
		{[]string{"-config", "../../config", "-otlp-endpoint", "collector"}, nil, exitError,
			`-otlp-endpoint: \"collector\" is neither host:port (OTLP over gRPC) nor an http:// or https:// URL (OTLP over HTTP)`},
	}
	for _, c := range cases {
		a, _, stderr := testApp(c.env)
		if code := a.run(context.Background(), c.args); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v %v: exit %d, stderr:\n%s\nwant exit %d and %q", c.args, c.env, code, stderr, c.code, c.want)
		}
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"RLS_GRPC_ADDR": "127.0.0.1:9999", "RLS_CONFIG": "from-env", "RLS_REDIS_CLUSTER": "true"}
	s, err := parseFlags([]string{"-config", "from-flag"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &bytes.Buffer{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.grpcAddr != "127.0.0.1:9999" || s.config != "from-flag" || !s.redis.cluster || s.httpAddr != ":8080" || s.store.value != memoryStore {
		t.Fatalf("got %+v: want the variable for -grpc-addr, the flag for -config, defaults elsewhere", s)
	}
	if got := envName("memory-max-buckets"); got != "RLS_MEMORY_MAX_BUCKETS" {
		t.Fatalf("envName: %s", got)
	}
}

func TestHelp(t *testing.T) {
	a, stdout, _ := testApp(nil)
	if code := a.run(context.Background(), []string{"help"}); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"check-config PATH", "-grpc-addr", "-redis-url", "RLS_<NAME>"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stdout)
		}
	}
}

// TestHelpFlag: -h, -help and --help list the commands, one line each,
// then serve's flags, on stdout.
func TestHelpFlag(t *testing.T) {
	for _, flag := range []string{"-h", "-help", "--help"} {
		a, stdout, stderr := testApp(nil)
		if code := a.run(context.Background(), []string{flag}); code != exitOK {
			t.Fatalf("%s: exit %d, stderr:\n%s", flag, code, stderr)
		}
		out := stdout.String()
		commands := []string{"envoy-rls [serve] [flags]", "envoy-rls check-config", "envoy-rls healthcheck", "envoy-rls version"}
		last := -1
		for _, c := range commands {
			i := strings.Index(out, "\n  "+c)
			if i < 0 || i < last {
				t.Fatalf("%s: %q missing or out of order in:\n%s", flag, c, out)
			}
			if line, _, _ := strings.Cut(out[i+1:], "\n"); len(strings.Fields(line)) < 4 {
				t.Errorf("%s: %q has no description on its line", flag, line)
			}
			last = i
		}
		if f := strings.Index(out, "-grpc-addr"); f < last {
			t.Errorf("%s: the flags do not follow the commands:\n%s", flag, out)
		}
	}
}

// TestVersionFlags: -version and --version print what the version command
// prints.
func TestVersionFlags(t *testing.T) {
	defer func(v, c string) { buildVersion, buildCommit = v, c }(buildVersion, buildCommit)
	buildVersion, buildCommit = "v9.8.7", "fedcba9876543210"
	a, want, _ := testApp(nil)
	if code := a.run(context.Background(), []string{"version"}); code != exitOK || want.String() != "envoy-rls v9.8.7 fedcba987654\n" {
		t.Fatalf("version: exit %d, %q", code, want)
	}
	for _, flag := range []string{"-version", "--version"} {
		a, stdout, stderr := testApp(nil)
		if code := a.run(context.Background(), []string{flag}); code != exitOK || stdout.String() != want.String() || stderr.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 and %q", flag, code, stdout, stderr, want)
		}
	}
}

// TestServe runs the service as main does, calls it, and stops it with a
// real SIGTERM.
func TestServe(t *testing.T) {
	a, _, stderr := testApp(map[string]string{"RLS_GRPC_ADDR": "127.0.0.1:0"})
	addrs := make(chan listenAddrs, 1)
	a.ready = func(l listenAddrs) { addrs <- l }
	exit := make(chan int, 1)
	go func() {
		exit <- a.run(context.Background(), []string{"-config", "../../config", "-http-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"})
	}()

	var grpcAddr, httpAddr net.Addr
	select {
	case got := <-addrs:
		grpcAddr, httpAddr = got.grpc, got.http
	case code := <-exit:
		t.Fatalf("serve exited with %d:\n%s", code, stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start within 10s")
	}

	conn, err := grpc.NewClient(grpcAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: "user", Value: "alice"}, {Key: "action", Value: "trade"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatuses()[0]; resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit().GetName() != "trades_per_user" || st.GetLimitRemaining() != 4 {
		t.Fatalf("unexpected response %v", resp)
	}
	// envoyproxy/ratelimit's probes too: gRPC health of "ratelimit" and
	// GET /healthcheck.
	for _, name := range []string{"envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
		health, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || health.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", name, health, err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/healthcheck"} {
		r, err := http.Get("http://" + httpAddr.String() + path)
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %v", path, r, err)
		}
		r.Body.Close()
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exit:
		if code != exitOK {
			t.Fatalf("exit %d after SIGTERM:\n%s", code, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of SIGTERM")
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Errorf("no shutdown log:\n%s", stderr)
	}
	if c, err := net.DialTimeout("tcp", grpcAddr.String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the gRPC port still accepts connections after shutdown")
	}
}

func TestCheckConfigAcceptsTheExamples(t *testing.T) {
	for _, dir := range []string{"../../examples/envoy/envoy-rls", "testdata/envoyproxy"} {
		a, _, stderr := testApp(nil)
		if code := a.run(context.Background(), []string{"check-config", dir}); code != exitOK {
			t.Errorf("check-config %s: exit %d:\n%s", dir, code, stderr)
		}
	}
}

// TestVersionStamped: a build stamped with -X (the image, built without
// .git) shows that version and commit.
func TestVersionStamped(t *testing.T) {
	defer func(v, c string) { buildVersion, buildCommit = v, c }(buildVersion, buildCommit)
	buildVersion, buildCommit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	a, stdout, _ := testApp(nil)
	if code := a.run(context.Background(), []string{"version"}); code != exitOK || stdout.String() != "envoy-rls v1.2.3 0123456789ab\n" {
		t.Fatalf("exit %d: %q", code, stdout)
	}
}

// TestFailStaticDefault: -rlqs-fail-static is rlqs.DefaultFailStatic with
// the default failure mode and 0 with allow, deny or local, unless given,
// by flag or variable; it must not be negative.
func TestFailStaticDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{nil, nil, rlqs.DefaultFailStatic},
		{[]string{"-store", "redis", "-failure-mode", "unavailable"}, nil, rlqs.DefaultFailStatic},
		{[]string{"-store", "redis", "-failure-mode", "allow"}, nil, 0},
		{[]string{"-store", "redis", "-failure-mode", "local"}, nil, 0},
		{[]string{"-store", "redis"}, map[string]string{"RLS_FAILURE_MODE": "deny"}, 0},
		{[]string{"-store", "redis", "-failure-mode", "deny", "-rlqs-fail-static", "30s"}, nil, 30 * time.Second},
		{[]string{"-store", "redis", "-failure-mode", "allow"}, map[string]string{"RLS_RLQS_FAIL_STATIC": "1m"}, time.Minute},
		{[]string{"-store", "redis", "-rlqs-fail-static", "0"}, nil, 0},
	} {
		s, err := parseFlags(c.args, lookupIn(c.env), io.Discard, false)
		if err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
		if s.rlqs.failStatic != c.want {
			t.Errorf("%v %v: fail-static %v, want %v", c.args, c.env, s.rlqs.failStatic, c.want)
		}
	}
	if _, err := parseFlags([]string{"-rlqs-fail-static", "-1s"}, lookupIn(nil), io.Discard, false); err == nil || !strings.Contains(err.Error(), "-rlqs-fail-static") {
		t.Fatalf("a negative -rlqs-fail-static: %v", err)
	}
}

// TestBatchWaitDefault: -redis-batch-wait is 0 in exact mode and
// localFirstBatchWait in the local-first mode (but on a Cluster), unless given, by flag or
// variable; it must not be negative. The batch pace is localFirstPaces
// waits in the local-first mode, none in exact mode.
func TestBatchWaitDefault(t *testing.T) {
	for _, c := range []struct {
		args       []string
		env        map[string]string
		want, pace time.Duration
	}{
		{[]string{"-store", "redis"}, nil, 0, 0},
		{[]string{"-store", "redis", "-sync-interval", "1s"}, nil, localFirstBatchWait, 4 * time.Millisecond},
		{[]string{"-store", "redis", "-sync-interval", "1s", "-redis-batch-wait", "0"}, nil, 0, 0},
		{[]string{"-store", "redis", "-sync-interval", "1s"}, map[string]string{"RLS_REDIS_BATCH_WAIT": "5ms"}, 5 * time.Millisecond, 20 * time.Millisecond},
		{[]string{"-store", "redis", "-redis-batch-wait", "2ms"}, nil, 2 * time.Millisecond, 0},
		{[]string{"-store", "redis", "-redis-cluster", "-sync-interval", "1s"}, nil, 0, 0},
	} {
		s, err := parseFlags(c.args, lookupIn(c.env), io.Discard, false)
		if err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
		if s.redisBatchWait != c.want || s.batchPace() != c.pace {
			t.Errorf("%v %v: batch wait %v and pace %v, want %v and %v", c.args, c.env, s.redisBatchWait, s.batchPace(), c.want, c.pace)
		}
	}
	if _, err := parseFlags([]string{"-redis-batch-wait", "-1ms"}, lookupIn(nil), io.Discard, false); err == nil || !strings.Contains(err.Error(), "-redis-batch-wait") {
		t.Errorf("a negative batch wait: %v, want an error naming the flag", err)
	}
}
