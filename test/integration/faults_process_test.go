package integration

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// binaryReplica starts the binary with the fault tests' limits (and
// config, if not empty, in their place) and args, and returns it with a
// replica that calls it.
func binaryReplica(t *testing.T, config string, args ...string) (*process, *replica) {
	t.Helper()
	if config == "" {
		config = faultConfig
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "faults.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, append([]string{"-config", dir}, args...)...)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, &replica{client: rlsv3.NewRateLimitServiceClient(conn)}
}

// binaryReplicas starts n binaries as binaryReplica does.
func binaryReplicas(t *testing.T, n int, config string, args ...string) []*replica {
	t.Helper()
	rs := make([]*replica, n)
	for i := range rs {
		_, rs[i] = binaryReplica(t, config, args...)
	}
	return rs
}

// TestShutdownUnderLoad sends the binary SIGTERM under load with
// -shutdown-delay 2s: health turns NOT_SERVING at once, so that load
// balancers stop sending, and every call is still decided during the
// delay; then the process exits cleanly.
func TestShutdownUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	const delay = 2 * time.Second
	p, r := binaryReplica(t, "", "-store", "redis", "-redis-url", srv.URL(), "-shutdown-delay", delay.String())
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	l := startLoad(t, []*replica{r}, oneLevel)
	time.Sleep(time.Second)
	termed := l.since()
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitUntil(t, time.Second, "NOT_SERVING after SIGTERM", func() bool {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var exited time.Duration
	select {
	case err := <-done:
		exited = l.since()
		if err != nil {
			t.Errorf("exit after SIGTERM: %v; output:\n%s", err, p.out)
		}
	case <-time.After(delay + 10*time.Second):
		t.Fatalf("envoy-rls did not exit within %s of SIGTERM", delay+10*time.Second)
	}
	l.stopLoad()
	l.report(t, map[time.Duration]string{termed: "SIGTERM", exited: "exited"})
	if exited-termed < delay {
		t.Errorf("exited %s after SIGTERM, before the %s delay", exited-termed, delay)
	}
	during := l.between(termed.Truncate(faultSlice)+faultSlice, termed+delay-faultSlice)
	t.Logf("during the shutdown delay: %s; exited %s after SIGTERM", during, (exited - termed).Round(time.Millisecond))
	if during.calls == 0 || during.ok != during.calls {
		t.Errorf("%d of %d calls not decided during the shutdown delay, want none", during.calls-during.ok, during.calls)
	}
}

// heldConfig is a bucket that drains in 3 s (100 units, one per 30 ms),
// for a local-first replica to hold units of.
const heldConfig = `
domain: api
descriptors:
  - key: held
    leaky_bucket: {size: 100, drip_rate: 30ms}
`

// TestLocalFirstReplicaKilled kills (SIGKILL) a local-first replica right
// after a burst, holding units of a bucket: nothing gives them back, and
// Redis has room for the whole bucket again within the time it takes to
// drain (size times drip rate, 3 s here), as docs/operations.md states:
// units leak on Redis from their grant.
func TestLocalFirstReplicaKilled(t *testing.T) {
	srv := redistest.Start(t)
	p, r := binaryReplica(t, heldConfig, "-store", "redis", "-redis-url", srv.URL(), "-sync-interval", "200ms")
	exact := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL()}, config: parseConfig(t, heldConfig)})[0]
	// room is what Redis has room for, by a check of 0 hits.
	room := func() uint32 {
		req := request([]string{"held=k"})
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
		return exact.call(t, req).GetStatuses()[0].GetLimitRemaining()
	}
	// A burst: after its first calls, the replica leases units and admits
	// from them, asking for more as they run short.
	for range 40 {
		r.call(t, request([]string{"held=k"}))
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	killed := time.Now()
	left := room()
	if left == 100 {
		t.Fatal("Redis had room for the whole bucket right after the burst: the replica held nothing")
	}
	waitUntil(t, 3*time.Second+500*time.Millisecond, "room for the whole bucket", func() bool { return room() == 100 })
	t.Logf("Redis had room for %d of 100 when the replica died; for all of it %s after", left, time.Since(killed).Round(time.Millisecond))
}
