package rlqsclient

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
)

// wait bounds every wait for something the client or the server does.
const wait = 5 * time.Second

// fakeServer is a minimal RLQS server on a loopback port: each stream is
// handed to the test, which reads its reports and scripts its responses.
type fakeServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	streams chan *fakeStream
}

// fakeStream is one StreamRateLimitQuotas call as the server sees it.
type fakeStream struct {
	srv     grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	reports chan *rlqsv3.RateLimitQuotaUsageReports // closed when the client's side ends
	end     chan error                              // ends the call with this status
}

func (f *fakeServer) StreamRateLimitQuotas(srv grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	fs := &fakeStream{srv: srv, reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 100), end: make(chan error, 1)}
	go func() {
		defer close(fs.reports)
		for {
			r, err := srv.Recv()
			if err != nil {
				return
			}
			fs.reports <- r
		}
	}()
	f.streams <- fs
	select {
	case err := <-fs.end:
		return err
	case <-srv.Context().Done():
		return nil
	}
}

// newFake starts a fake server and returns it with a connection to it.
func newFake(t *testing.T) (*fakeServer, *grpc.ClientConn) {
	t.Helper()
	f := &fakeServer{streams: make(chan *fakeStream, 16)}
	addr := grpctest.Serve(t, func(g *grpc.Server) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, f) })
	return f, grpctest.Dial(t, addr)
}

// start returns an Instance on a manual clock talking to a new fake server.
func start(t *testing.T, opts Options) (*Instance, *fakeServer, *ManualClock) {
	t.Helper()
	f, conn := newFake(t)
	clock := NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if opts.Clock == nil {
		opts.Clock = clock
	}
	if opts.Domain == "" {
		opts.Domain = "test"
	}
	i := Start(context.Background(), conn, opts)
	t.Cleanup(i.Close)
	return i, f, clock
}

// nextStream waits for the client to open a stream.
func (f *fakeServer) nextStream(t *testing.T) *fakeStream {
	t.Helper()
	select {
	case fs := <-f.streams:
		return fs
	case <-time.After(wait):
		t.Fatal("no stream opened")
		return nil
	}
}

// noStream fails if the client opens a stream within d.
func (f *fakeServer) noStream(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-f.streams:
		t.Fatal("a stream was opened")
	case <-time.After(d):
	}
}

// next waits for the stream's next report.
func (fs *fakeStream) next(t *testing.T) *rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	select {
	case r, ok := <-fs.reports:
		if !ok {
			t.Fatal("the stream ended before a report")
		}
		return r
	case <-time.After(wait):
		t.Fatal("no report")
		return nil
	}
}

// respond sends a response of actions and waits until the client applied it.
func respond(t *testing.T, i *Instance, fs *fakeStream, actions ...*rlqsv3.RateLimitQuotaResponse_BucketAction) {
	t.Helper()
	n := i.Stats().ResponsesReceived
	if err := fs.srv.Send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the response to be applied", func() bool { return i.Stats().ResponsesReceived > n })
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// usageOf returns the usage of id in r, failing when it is not there.
func usageOf(t *testing.T, r *rlqsv3.RateLimitQuotaUsageReports, id map[string]string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	t.Helper()
	for _, u := range r.GetBucketQuotaUsages() {
		if keyOf(u.GetBucketId().GetBucket()) == keyOf(id) {
			return u
		}
	}
	t.Fatalf("bucket %v not in report %v", id, r)
	return nil
}

// checkUsage fails unless u reports allowed, denied and elapsed seconds.
func checkUsage(t *testing.T, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, allowed, denied uint64, elapsed int64) {
	t.Helper()
	if u.GetTimeElapsed() == nil {
		t.Errorf("bucket %v: time_elapsed unset", u.GetBucketId().GetBucket())
	}
	if u.GetNumRequestsAllowed() != allowed || u.GetNumRequestsDenied() != denied || u.GetTimeElapsed().GetSeconds() != elapsed || u.GetTimeElapsed().GetNanos() != 0 {
		t.Errorf("bucket %v: allowed %d denied %d elapsed %v, want %d %d %ds", u.GetBucketId().GetBucket(),
			u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().AsDuration(), allowed, denied, elapsed)
	}
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

func tokens(max, perFill uint32, interval time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(interval),
	}}}
}

// assign is a quota assignment of s for id; a negative ttl leaves it unset.
func assign(id map[string]string, s *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	qa := &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{RateLimitStrategy: s}
	if ttl >= 0 {
		qa.AssignmentTimeToLive = durationpb.New(ttl)
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: qa},
	}
}

func abandon(id map[string]string) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}

// admits makes n requests on id and returns how many were allowed.
func admits(i *Instance, id map[string]string, n int) int {
	got := 0
	for range n {
		if i.Request(id) {
			got++
		}
	}
	return got
}

// kinds lists the kinds of i's misreads, in order.
func kinds(i *Instance) []MisreadKind {
	var ks []MisreadKind
	for _, m := range i.Misreads() {
		ks = append(ks, m.Kind)
	}
	return ks
}
