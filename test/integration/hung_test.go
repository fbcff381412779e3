package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestFailureModesWithHungRedis stops Redis with SIGSTOP (it accepts
// connections and never answers, unlike a Redis that is down) under the
// binary, in each -failure-mode at its other defaults, and sends calls
// with Envoy's default deadline of 20 ms: every call of a round must
// be answered by the failure mode before its deadline, none end in
// DeadlineExceeded. A round that misses is run again, up to three: on a
// loaded machine the whole process can stall for longer than any margin
// (5 ms here, 10 for local). Before store calls ended a margin before the
// caller's deadline, most calls of every round missed.
func TestFailureModesWithHungRedis(t *testing.T) {
	const (
		calls    = 50
		rounds   = 3
		deadline = 20 * time.Millisecond
	)
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
			_, r := binaryReplica(t, serviceConfig, "-store", "redis", "-redis-url", srv.URL(), "-failure-mode", c.mode)
			call := func(user string) (*rlsv3.RateLimitResponse, error, bool) {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				resp, err := r.client.ShouldRateLimit(ctx, request([]string{"user=" + user}))
				return resp, err, ctx.Err() == nil
			}
			r.call(t, request([]string{"user=connect"})) // the gRPC connection, not timed
			if _, err, _ := call("warm-up"); err != nil {
				t.Fatalf("with Redis answering: %v", err)
			}

			srv.Pause()
			defer srv.Resume()
			for round := 1; ; round++ {
				answered, slowest, wrong := hungRound(calls, call, c.answered)
				t.Logf("-failure-mode %s, Redis stopped, round %d: %d/%d calls answered by the failure mode within %s (slowest %s)",
					c.mode, round, answered, calls, deadline, slowest.Round(100*time.Microsecond))
				if answered == calls {
					break
				}
				if round == rounds {
					t.Fatalf("in each of %d rounds some calls were not answered by the failure mode in time, e.g. %v", rounds, wrong[:min(3, len(wrong))])
				}
			}
		})
	}
}

// hungRound makes calls calls, 5 at a time, and counts those answered in
// time as the failure mode answers; it returns the slowest answer and a
// description of each wrong one.
func hungRound(calls int, call func(user string) (*rlsv3.RateLimitResponse, error, bool),
	answeredBy func(*rlsv3.RateLimitResponse, error) bool) (answered int, slowest time.Duration, wrong []string) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for w := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls / 5 {
				start := time.Now()
				resp, err, inTime := call(fmt.Sprintf("u%d-%d", w, i))
				took := time.Since(start)
				mu.Lock()
				slowest = max(slowest, took)
				if inTime && answeredBy(resp, err) {
					answered++
				} else {
					wrong = append(wrong, fmt.Sprintf("%v %v after %s", resp.GetOverallCode(), err, took.Round(100*time.Microsecond)))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answered, slowest, wrong
}
