package rls

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// slowChecker answers after a delay, as a Redis a round trip away does.
type slowChecker struct {
	delay time.Duration
	err   error
}

func (c slowChecker) Check(ctx context.Context) error {
	select {
	case <-time.After(c.delay):
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestWatchStoreKnowsBeforeReturning: once WatchStore returns, the health
// status already says what the first check found, so a server announced as
// started never answers a probe with the status it had before the check.
func TestWatchStoreKnowsBeforeReturning(t *testing.T) {
	for _, c := range []struct {
		err  error
		want healthpb.HealthCheckResponse_ServingStatus
	}{
		{nil, healthpb.HealthCheckResponse_SERVING},
		{errors.New("refused"), healthpb.HealthCheckResponse_NOT_SERVING},
	} {
		hs := health.NewServer()
		SetServing(hs, c.err != nil) // the opposite of what the check finds
		ctx, cancel := context.WithCancel(context.Background())
		done := WatchStore(ctx, slowChecker{delay: 50 * time.Millisecond, err: c.err}, hs, slog.New(slog.DiscardHandler), false)
		resp, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceName})
		if err != nil || resp.GetStatus() != c.want {
			t.Errorf("store error %v: right after WatchStore returned, %v %v; want %v", c.err, resp.GetStatus(), err, c.want)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the watch did not end with its context")
		}
	}
}
