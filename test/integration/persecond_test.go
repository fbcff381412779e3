package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// perSecondConfig has a limit per minute and one per second beneath it.
const perSecondConfig = `domain: ps
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 2}
`

// TestStartedAsRatelimitWithPerSecondRedis starts the binary as ratelimit
// with REDIS_PERSECOND=true: the limit per second is counted on
// REDIS_PERSECOND_URL's Redis and the limit per minute on REDIS_URL's,
// each only there, in exact mode and in the local-first mode; in exact
// mode, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, a request the
// per-second limit refuses charges the minute limit nothing.
func TestStartedAsRatelimitWithPerSecondRedis(t *testing.T) {
	for _, mode := range []struct {
		name string
		env  []string
	}{{"exact", nil}, {"local-first", []string{"RLS_SYNC_INTERVAL=100ms"}}} {
		t.Run(mode.name, func(t *testing.T) {
			first, second := redistest.Start(t), redistest.Start(t)
			root := t.TempDir()
			configDir := filepath.Join(root, "config")
			if err := os.MkdirAll(configDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(configDir, "ps.yaml"), []byte(perSecondConfig), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append([]string{"USE_STATSD=false", "RUNTIME_ROOT=" + root, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
				"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + first.Addr(),
				"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + second.Addr()}, mode.env...)
			rl := startAsRatelimit(t, "127.0.0.1", env...)
			conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := rlsv3.NewRateLimitServiceClient(conn)
			req := request([]string{"user=alice"}, []string{"user=alice", "action=buy"})
			req.Domain = "ps"
			ok, over := 0, 0
			call := func() {
				resp, err := c.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, rl.out)
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					ok++
				} else {
					over++
				}
			}
			// The minute limit's count is read against every call: all in one
			// minute's window.
			if now := time.Now(); now.Second() >= 40 {
				time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 100*time.Millisecond).Sub(now))
			}
			for range 8 {
				call()
			}
			if over == 0 {
				t.Fatalf("8 quick calls at 2 a second: none over the limit; output:\n%s", rl.out)
			}
			// A per-second bucket lasts its second: each look follows a call.
			const minuteKey, secondKey = "rls:{ps|user=alice}|#fw1m", "rls:{ps|user=alice}|action=buy|#fw1s"
			waitFor(t, rl, "the buckets on their Redis", func() bool {
				call()
				return slices.Equal(redisKeys(t, first), []string{minuteKey}) && slices.Equal(redisKeys(t, second), []string{secondKey})
			})
			if mode.env != nil {
				return // the local-first mode holds leased units on Redis
			}
			st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: first.URL()}})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			minute := limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: time.Minute}
			states := make([]limit.State, 1)
			at, err := st.State(ctx, time.Now(), []limit.Bucket{{Key: "ps|user=alice|#fw1m", Limit: minute}}, states)
			if err != nil {
				t.Fatal(err)
			}
			if n := limit.Count(states[0], minute, at); n != int64(ok) {
				t.Errorf("the minute limit counts %d on the first Redis after %d admitted and %d refused: the refused charged it", n, ok, over)
			}
		})
	}
}

// redisKeys returns the keys srv holds, but the service's reset channel's.
func redisKeys(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return !strings.HasPrefix(k, "rls:{") })
	slices.Sort(keys)
	return keys
}
