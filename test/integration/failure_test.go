package integration

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/fallback"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

type checkedStore interface {
	rls.Store
	rls.Checker
}

// service builds a service on store, with the health watch running.
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

func serving(hs *health.Server) bool {
	resp, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
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

// TestFailureModes stops Redis under a service in each failure mode.
func TestFailureModes(t *testing.T) {
	cases := []struct {
		mode      rls.FailureMode
		wantCode  rlsv3.RateLimitResponse_Code
		wantError codes.Code
	}{
		{rls.FailUnavailable, 0, codes.Unavailable},
		{rls.FailAllow, rlsv3.RateLimitResponse_OK, codes.OK},
		{rls.FailDeny, rlsv3.RateLimitResponse_OVER_LIMIT, codes.OK},
	}
	for _, c := range cases {
		t.Run(c.mode.String(), func(t *testing.T) {
			srv := redistest.New(t)
			srv.Restart()
			store, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			svc, hs := service(t, store, rls.Options{FailureMode: c.mode, StoreTimeout: 100 * time.Millisecond})
			waitUntil(t, 5*time.Second, "serving", func() bool { return serving(hs) })
			if got, err := shouldRateLimit(svc, "user=a"); err != nil || got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with Redis up: %v %v", got, err)
			}
			srv.Stop()
			got, err := shouldRateLimit(svc, "user=a")
			if status.Code(err) != c.wantError || got != c.wantCode {
				t.Fatalf("with Redis down: %v, %v; want %v, %v", got, err, c.wantCode, c.wantError)
			}
			if c.mode == rls.FailUnavailable {
				waitUntil(t, 5*time.Second, "NOT_SERVING with Redis down", func() bool { return !serving(hs) })
			} else {
				time.Sleep(1500 * time.Millisecond) // a health check or two
				if !serving(hs) {
					t.Fatal("NOT_SERVING while the failure mode answers")
				}
			}
			srv.Restart()
			waitUntil(t, 5*time.Second, "serving again", func() bool { return serving(hs) })
			if got, err := shouldRateLimit(svc, "user=a"); err != nil || got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with Redis back: %v %v", got, err)
			}
		})
	}
}

// TestFailureModeLocal: while Redis is down the service decides on its own
// memory (limits still apply, per replica), then goes back to Redis.
func TestFailureModeLocal(t *testing.T) {
	srv := redistest.New(t)
	srv.Restart()
	primary, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	var toLocal, toRedis atomic.Int64
	store := fallback.New(primary, fallback.Options{
		Timeout:  100 * time.Millisecond,
		Logger:   slog.New(slog.DiscardHandler),
		OnSwitch: func(local bool) { map[bool]*atomic.Int64{true: &toLocal, false: &toRedis}[local].Add(1) },
	})
	defer store.Close()
	svc, hs := service(t, store, rls.Options{})

	// The skew bucket holds 3: two calls on Redis.
	for range 2 {
		if got, err := shouldRateLimit(svc, "skew=local"); err != nil || got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("on Redis: %v %v", got, err)
		}
	}
	srv.Stop()
	// Locally the bucket starts empty: three pass, the fourth is over.
	for i := range 4 {
		got, err := shouldRateLimit(svc, "skew=local")
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || got != want {
			t.Fatalf("call %d with Redis down: %v %v, want %v", i, got, err, want)
		}
	}
	if toLocal.Load() != 1 || !store.Local() || !serving(hs) {
		t.Fatalf("switches to local: %d, local: %v, serving: %v", toLocal.Load(), store.Local(), serving(hs))
	}
	srv.Restart()
	waitUntil(t, 5*time.Second, "back on Redis", func() bool { return !store.Local() })
	if toRedis.Load() != 1 {
		t.Fatalf("switches back: %d", toRedis.Load())
	}
	// The restarted Redis lost its data: the bucket starts again, there.
	if got, _ := shouldRateLimit(svc, "skew=local"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call on Redis again: %v", got)
	}
	if n, err := srv.Client(t).Exists(context.Background(), "rls:{api|skew=local}").Result(); err != nil || n != 1 {
		t.Fatalf("the bucket is not in Redis after the switch back: %v %v", n, err)
	}
}

// TestOverLimitCacheSkipsRedis: once Redis has said a bucket is full,
// calls for it are rejected without a Redis command until it has room, and
// never admitted while Redis would reject them.
func TestOverLimitCacheSkipsRedis(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	store, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cached, _ := service(t, store, rls.Options{OverLimitCacheSize: 1000})
	other, _ := service(t, store, rls.Options{}) // a replica without the cache
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
