package integration

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky/fallback"
	"github.com/envoy-rls/envoy-rls/pkg/leaky/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// TestFailureModesWithHungRedis stops Redis with SIGSTOP (it accepts
// connections and never answers, unlike a Redis that is down) and sends
// calls with Envoy's default deadline of 20 ms: every call must be answered
// by the failure mode before its deadline, none end in DeadlineExceeded.
func TestFailureModesWithHungRedis(t *testing.T) {
	const (
		calls    = 50
		deadline = 20 * time.Millisecond
	)
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "service.yaml", Data: []byte(serviceConfig)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode string
		// answered tells whether a call's outcome is the failure mode's.
		answered func(*rlsv3.RateLimitResponse, error) bool
	}{
		{"allow", func(r *rlsv3.RateLimitResponse, err error) bool {
			return err == nil && r.GetOverallCode() == rlsv3.RateLimitResponse_OK
		}},
		{"deny", func(r *rlsv3.RateLimitResponse, err error) bool {
			return err == nil && r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		}},
		{"unavailable", func(_ *rlsv3.RateLimitResponse, err error) bool { return status.Code(err) == codes.Unavailable }},
		{"local", func(r *rlsv3.RateLimitResponse, err error) bool { return err == nil && r.GetOverallCode() != 0 }},
	} {
		t.Run(c.mode, func(t *testing.T) {
			srv := redistest.New(t)
			srv.Restart()
			store, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}, Pipeline: redis.DefaultPipeline})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			// As serve sets them up for each -failure-mode.
			opts := rls.Options{Store: store, Config: cfg, Logger: slog.New(slog.DiscardHandler), StoreTimeout: 100 * time.Millisecond}
			switch c.mode {
			case "allow":
				opts.FailureMode = rls.FailAllow
			case "deny":
				opts.FailureMode = rls.FailDeny
			case "local":
				opts.Store = fallback.New(store, fallback.Options{Timeout: 100 * time.Millisecond, Logger: opts.Logger})
				opts.StoreTimeout = 0
			}
			svc, err := rls.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			call := func(user string) (*rlsv3.RateLimitResponse, error, bool) {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				st := time.Now()
				resp, err := svc.ShouldRateLimit(ctx, request([]string{"user=" + user}))
				if el := time.Since(st); el > 12*time.Millisecond {
					t.Logf("slow %v %v", el, err)
				}
				return resp, err, ctx.Err() == nil
			}
			if _, err, _ := call("warm-up"); err != nil {
				t.Fatalf("with Redis answering: %v", err)
			}

			srv.Pause()
			defer srv.Resume()
			var (
				mu       sync.Mutex
				answered int
				wrong    []string
				wg       sync.WaitGroup
			)
			for w := range 5 { // 5 callers at once, 10 calls each
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range calls / 5 {
						resp, err, inTime := call(fmt.Sprintf("u%d-%d", w, i))
						mu.Lock()
						if inTime && c.answered(resp, err) {
							answered++
						} else {
							wrong = append(wrong, fmt.Sprintf("%v %v in time %v", resp.GetOverallCode(), err, inTime))
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			t.Logf("-failure-mode %s, Redis stopped: %d/%d calls answered by the failure mode within %s", c.mode, answered, calls, deadline)
			if answered != calls {
				t.Errorf("%d calls not answered by the failure mode in time, e.g. %v", len(wrong), wrong[:min(3, len(wrong))])
			}
		})
	}
}
