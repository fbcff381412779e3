package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

func TestSnapshotFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "redis", "-memory-snapshot", "/data/buckets"}, "-memory-snapshot keeps the memory store's buckets across restarts: with -store redis they live in Redis"},
		{[]string{"-memory-snapshot-start-empty"}, "need -memory-snapshot"},
		{[]string{"-memory-snapshot-interval", "1s"}, "need -memory-snapshot"},
		{[]string{"-memory-snapshot-interval", "10s"}, "need -memory-snapshot"}, // the default's value, given
		{[]string{"-memory-snapshot", "/data/buckets", "-memory-snapshot-interval", "0s"}, "-memory-snapshot-interval: must be positive"},
	} {
		if _, err := parseFlags(c.args, lookupIn(nil), io.Discard, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
	s, err := parseFlags(nil, lookupIn(map[string]string{"RLS_MEMORY_SNAPSHOT": "/data/buckets", "RLS_MEMORY_SNAPSHOT_INTERVAL": "2s"}), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if o := s.snapshot.options(nil); o.Path != "/data/buckets" || o.Interval != 2*time.Second || o.StartEmpty {
		t.Errorf("from the environment: %+v", o)
	}
}

// stop ends serve as SIGTERM does and returns its exit code.
func (s *server) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.exit:
		s.exit <- code // for the cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s")
		return -1
	}
}

const budgetConfig = `domain: api
descriptors:
  - key: user
    name: monthly
    fixed_window: {limit: 3, window: 720h}
  - key: team
    leaky_bucket: {size: 2, drip_rate: 1h}
`

// TestServeKeepsCountsAcrossRestart: a budget spent before a stop is
// still spent after the start; a limit that left the config meanwhile is
// dropped and counted; each limit is a gauge, which follows reloads.
func TestServeKeepsCountsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	writeConfigMap(t, dir, budgetConfig)
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	s := startServe(t, "-config", dir, "-memory-snapshot", snap)
	c := s.client(t)
	for range 3 {
		code(t, c, rateRequest("api", "user=alice"))
	}
	code(t, c, rateRequest("api", "team=red"))
	if got := code(t, c, rateRequest("api", "user=alice")); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 4th call of a budget of 3: %v", got)
	}
	if got := s.stop(t); got != exitOK {
		t.Fatalf("exit %d:\n%s", got, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "memory snapshot written at shutdown") {
		t.Fatalf("no snapshot at shutdown:\n%s", s.stderr)
	}

	// Started again without the team limit.
	writeConfigMap(t, dir, strings.Split(budgetConfig, "  - key: team")[0])
	s = startServe(t, "-config", dir, "-memory-snapshot", snap)
	c = s.client(t)
	if got := code(t, c, rateRequest("api", "user=alice")); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the restart, the spent budget: %v\n%s", got, s.stderr)
	}
	if got := code(t, c, rateRequest("api", "user=bob")); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after the restart, a fresh user: %v", got)
	}
	if log := s.stderr.String(); !strings.Contains(log, "memory snapshot read") || !strings.Contains(log, "kept=1") || !strings.Contains(log, "dropped_left_config=1") {
		t.Errorf("the restart's log:\n%s", log)
	}
	if v := s.metric(t, `envoy_rls_limit{algorithm="fixed_window",domain="api",limit="monthly"}`); v != 3 {
		t.Errorf("envoy_rls_limit of the budget: %v, want 3", v)
	}
	if v := s.metric(t, `envoy_rls_limit_rate_per_second{algorithm="fixed_window",domain="api",limit="monthly"}`); v != 3.0/(720*3600) {
		t.Errorf("envoy_rls_limit_rate_per_second of the budget: %v", v)
	}
	// A reload: the budget goes up to 5, the team limit comes back.
	writeConfigMap(t, dir, strings.Replace(budgetConfig, "limit: 3", "limit: 5", 1))
	eventually(t, "the gauges follow the reload", func() bool {
		return s.metric(t, `envoy_rls_limit{algorithm="fixed_window",domain="api",limit="monthly"}`) == 5 &&
			s.metric(t, `envoy_rls_limit{algorithm="leaky_bucket",domain="api",limit="team"}`) == 2
	})
}

// TestServeSnapshotWithXDS: with the config from an xDS server, the
// buckets read back are matched with the first config it sends.
func TestServeSnapshotWithXDS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := xdstest.Start(t, lis)
	x.Set(t, "envoy-rls", "1", xdstest.Limit("api", "user", "alice", "alice", 2, rlsconfv3.RateLimitUnit_HOUR))
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	args := []string{"-config-xds", x.Addr, "-memory-snapshot", snap}
	s := startServe(t, args...)
	c := s.client(t)
	eventually(t, "the xDS config in force", func() bool {
		return s.metric(t, `envoy_rls_limit{algorithm="leaky_bucket",domain="api",limit="alice"}`) == 2
	})
	for range 2 {
		if got := code(t, c, rateRequest("api", "user=alice")); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("a call within the limit: %v", got)
		}
	}
	s.stop(t)

	s = startServe(t, args...)
	c = s.client(t)
	eventually(t, "the xDS config in force", func() bool { return strings.Contains(s.stderr.String(), "memory snapshot matched with the config") })
	if got := code(t, c, rateRequest("api", "user=alice")); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the restart, the spent limit: %v", got)
	}
	if !strings.Contains(s.stderr.String(), "kept=1") {
		t.Errorf("the restart's log:\n%s", s.stderr)
	}
}

// TestServeRefusesABadSnapshot: an unreadable snapshot stops the start
// with the file's name and how to start anyway.
func TestServeRefusesABadSnapshot(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	if err := os.WriteFile(snap, []byte("not a snapshot at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _, stderr := testApp(nil)
	code := a.run(t.Context(), []string{"-config", "../../config", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-admin-addr", "", "-memory-snapshot", snap})
	if log := stderr.String(); code != exitError || !strings.Contains(log, snap+": not a memory snapshot") || !strings.Contains(log, "-memory-snapshot-start-empty") {
		t.Fatalf("exit %d:\n%s", code, log)
	}
}
