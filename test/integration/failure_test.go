package integration

import (
	"context"
	"log/slog"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

type checkedStore interface {
	rls.Store
	rls.Checker
}

// service builds a service on store, with the health watch running, as
// serve does.
func service(t *testing.T, store checkedStore, opts rls.Options) (*rls.Service, *health.Server) {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "service.yaml", Data: []byte(serviceConfig)})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Config, opts.Logger = store, cfg, slog.New(slog.DiscardHandler)
	svc, err := rls.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go rls.WatchStore(ctx, store, hs, opts.Logger, opts.FailureMode != rls.FailUnavailable)
	return svc, hs
}

func shouldRateLimit(svc *rls.Service, pairs ...string) (rlsv3.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := svc.ShouldRateLimit(ctx, request(pairs))
	return resp.GetOverallCode(), err
}

// waitUntil polls cond until it holds, for at most within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthOf returns whether the binary p reports SERVING on gRPC, as a
// load balancer asks.
func healthOf(t *testing.T, p *process) func() bool {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}
}

// overall calls r with a second's deadline and returns the overall code.
func (r *replica) overall(pairs ...string) (rlsv3.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, request(pairs))
	return resp.GetOverallCode(), err
}

// TestFailureModes stops Redis under the binary in each failure mode.
func TestFailureModes(t *testing.T) {
	cases := []struct {
		mode      string
		wantCode  rlsv3.RateLimitResponse_Code
		wantError codes.Code
	}{
		{"unavailable", 0, codes.Unavailable},
		{"allow", rlsv3.RateLimitResponse_OK, codes.OK},
		{"deny", rlsv3.RateLimitResponse_OVER_LIMIT, codes.OK},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			srv := redistest.New(t)
			srv.Restart()
			p, r := binaryReplica(t, serviceConfig, "-store", "redis", "-redis-url", srv.URL(), "-failure-mode", c.mode)
			serving := healthOf(t, p)
			waitUntil(t, 5*time.Second, "serving", serving)
			if got, err := r.overall("user=a"); err != nil || got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with Redis up: %v %v", got, err)
			}
			srv.Stop()
			got, err := r.overall("user=a")
			if status.Code(err) != c.wantError || got != c.wantCode {
				t.Fatalf("with Redis down: %v, %v; want %v, %v", got, err, c.wantCode, c.wantError)
			}
			if c.mode == "unavailable" {
				waitUntil(t, 5*time.Second, "NOT_SERVING with Redis down", func() bool { return !serving() })
			} else {
				time.Sleep(1500 * time.Millisecond) // a health check or two
				if !serving() {
					t.Fatal("NOT_SERVING while the failure mode answers")
				}
			}
			srv.Restart()
			waitUntil(t, 5*time.Second, "serving again", serving)
			if got, err := r.overall("user=a"); err != nil || got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with Redis back: %v %v", got, err)
			}
		})
	}
}

// TestFailureModeLocal: while Redis is down the binary decides on its own
// memory (limits still apply, per replica), then goes back to Redis.
func TestFailureModeLocal(t *testing.T) {
	srv := redistest.New(t)
	srv.Restart()
	p, r := binaryReplica(t, serviceConfig, "-store", "redis", "-redis-url", srv.URL(), "-failure-mode", "local")
	serving := healthOf(t, p)
	metric := func(series string) float64 { return scrape(t, p.httpAddr, series) }
	const toLocal, toRedis, local = `envoy_rls_store_switches_total{to="local"}`, `envoy_rls_store_switches_total{to="redis"}`, "envoy_rls_store_fallback"

	// The skew bucket holds 3: two calls on Redis.
	for range 2 {
		if got, err := r.overall("skew=local"); err != nil || got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("on Redis: %v %v", got, err)
		}
	}
	srv.Stop()
	// Locally the bucket starts empty: three pass, the fourth is over.
	for i := range 4 {
		got, err := r.overall("skew=local")
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || got != want {
			t.Fatalf("call %d with Redis down: %v %v, want %v", i, got, err, want)
		}
	}
	if metric(toLocal) != 1 || metric(local) != 1 || !serving() {
		t.Fatalf("switches to local: %v, local: %v, serving: %v", metric(toLocal), metric(local), serving())
	}
	srv.Restart()
	waitUntil(t, 5*time.Second, "back on Redis", func() bool { return metric(local) == 0 })
	if metric(toRedis) != 1 {
		t.Fatalf("switches back: %v", metric(toRedis))
	}
	// The restarted Redis lost its data: the bucket starts again, there.
	if got, err := r.overall("skew=local"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call on Redis again: %v %v", got, err)
	}
	if n, err := srv.Client(t).Exists(context.Background(), "rls:{api|skew=local}").Result(); err != nil || n != 1 {
		t.Fatalf("the bucket is not in Redis after the switch back: %v %v", n, err)
	}
}

// TestFailureModeLocalThenRedisAgain: what the local store refused while
// Redis hung is not refused on Redis once it answers again. The binary
// at its default flags (the over-limit cache on): a call on Redis, then
// Redis hangs (paused: its connections stay up; the call that times out
// is run when it goes on, two of three) and three pass locally, the
// fourth over; Redis answers again and the next call passes there.
func TestFailureModeLocalThenRedisAgain(t *testing.T) {
	srv := redistest.Start(t)
	p, r := binaryReplica(t, serviceConfig, "-store", "redis", "-redis-url", srv.URL(), "-failure-mode", "local")
	metric := func(series string) float64 { return scrape(t, p.httpAddr, series) }
	if got, err := r.overall("skew=pause"); err != nil || got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("on Redis: %v %v", got, err)
	}
	srv.Pause()
	for i := range 4 {
		got, err := r.overall("skew=pause")
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || got != want {
			srv.Resume()
			t.Fatalf("call %d with Redis hung: %v %v, want %v", i, got, err, want)
		}
	}
	srv.Resume()
	waitUntil(t, 10*time.Second, "back on Redis", func() bool { return metric("envoy_rls_store_fallback") == 0 })
	if got, err := r.overall("skew=pause"); err != nil || got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("on Redis again, which holds 2 of 3: %v %v, want OK (not the local store's refusal); output:\n%s", got, err, p.out)
	}
}

// TestOverLimitCacheSkipsRedis: once Redis has said a bucket is full,
// calls for it are rejected without a Redis command until it has room, and
// never admitted while Redis would reject them.
func TestOverLimitCacheSkipsRedis(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	store, err := redis.New(servedRedis(redis.ClientOptions{URL: srv.URL()}, false))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Two services in process, each wired as serve wires one, so that
	// Redis's command counts are their calls alone: one at the default
	// flags, one with -local-cache-size 0.
	var opts rls.Options
	asServed(&opts)
	cached, _ := service(t, store, opts)
	opts.OverLimitCacheSize = 0
	other, _ := service(t, store, opts)
	for range 3 {
		shouldRateLimit(cached, "skew=cache")
	}
	if got, _ := shouldRateLimit(cached, "skew=cache"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth call: %v", got)
	}
	ctx := context.Background()
	admin.ConfigResetStat(ctx)
	for i := range 50 {
		if got, _ := shouldRateLimit(cached, "skew=cache"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("call %d from the cache: %v", i, got)
		}
		// Redis agrees, asked by the other replica.
		if got, _ := shouldRateLimit(other, "skew=cache"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("call %d: Redis would admit what the cache rejected", i)
		}
	}
	if n := redistest.CommandCalls(t, admin)["evalsha"]; n != 50 {
		t.Fatalf("%d script calls for 50 cached and 50 uncached calls, want only the 50 uncached", n)
	}
}
