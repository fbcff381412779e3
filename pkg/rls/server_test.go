package rls

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// serve starts the real gRPC server for svc on a loopback port and returns
// a client connection to it.
func serve(t *testing.T, svc *Service) *grpc.ClientConn {
	t.Helper()
	hs := health.NewServer()
	SetServing(hs, true)
	g := NewGRPCServer(svc, nil, hs, slog.New(slog.DiscardHandler))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func call(t *testing.T, client rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return render(resp)
}

func TestEndToEnd(t *testing.T) {
	svc, c := newService(t, Options{})
	client := rlsv3.NewRateLimitServiceClient(serve(t, svc))
	trade := request("api", desc("user=alice", "action=trade"))
	steps := []step{
		{0, trade, "OK [OK trades 30/MINUTE left=2 reset=2s] X-RateLimit-Remaining=2 X-RateLimit-Clear=2"},
		{0, trade, "OK [OK trades 30/MINUTE left=1 reset=4s] X-RateLimit-Remaining=1 X-RateLimit-Clear=4"},
		{0, trade, "OK [OK trades 30/MINUTE left=0 reset=6s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6"},
		{0, trade, "OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=2s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6 X-RateLimit-Reset=2 Retry-After=2"},
		// Rejected trades charged nothing: the user level holds 3, not 4.
		{0, request("api", desc("user=alice")), "OK [OK 1/SECOND left=6 reset=4s] X-RateLimit-Remaining=6 X-RateLimit-Clear=4"},
		{0, request("web", desc("user=alice")), "OK [OK]"},
		{0, request("api", desc("nothing=here")), "OK [OK]"},
		{0, request("api", desc("client=internal")), "OK [OK]"},
		{0, request("api", desc("user=bob"), desc("client=abuser")),
			"OVER_LIMIT [OK 1/SECOND left=10 reset=0s; OVER_LIMIT 0/SECOND left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=0 X-RateLimit-Reset=1 Retry-After=1"},
		{2 * time.Second, trade, "OK [OK trades 30/MINUTE left=0 reset=6s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6"},
	}
	for i, st := range steps {
		c.now = t0.Add(st.at)
		if got := call(t, client, st.req); got != st.want {
			t.Fatalf("step %d:\ngot  %s\nwant %s", i, got, st.want)
		}
	}
}

func TestEndToEndInvalidArgument(t *testing.T) {
	svc, _ := newService(t, Options{})
	client := rlsv3.NewRateLimitServiceClient(serve(t, svc))
	cases := map[string]*rlsv3.RateLimitRequest{
		"domain is empty":                            request("", desc("user=a")),
		"request has no descriptors":                 request("api"),
		"descriptors[0] has no entries":              request("api", desc()),
		"descriptors[0].entries[0] has an empty key": request("api", desc("=a")),
	}
	for want, req := range cases {
		_, err := client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("got %v, want InvalidArgument: %s", err, want)
		}
	}
}

func TestEndToEndConcurrentAdmissionsAreExact(t *testing.T) {
	svc, _ := newService(t, Options{})
	client := rlsv3.NewRateLimitServiceClient(serve(t, svc))
	const calls = 200
	var (
		ok, over atomic.Int64
		wg       sync.WaitGroup
		start    = make(chan struct{})
		errs     = make(chan error, calls)
	)
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := client.ShouldRateLimit(ctx, request("api", desc("hot=key")))
			switch {
			case err != nil:
				errs <- err
			case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
				ok.Add(1)
			default:
				over.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("call failed: %v", err)
	}
	if ok.Load() != 100 || over.Load() != 100 {
		t.Fatalf("%d concurrent calls on a bucket of 100: %d OK and %d OVER_LIMIT, want exactly 100 and 100", calls, ok.Load(), over.Load())
	}
}

func TestEndToEndHealthAndPanics(t *testing.T) {
	panicking := storeFunc(func(context.Context, time.Time, []limit.Bucket, []limit.Result) error {
		panic("store bug")
	})
	svc, _ := newService(t, Options{Store: panicking})
	conn := serve(t, svc)
	for _, name := range []string{"", ServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v", name, resp, err)
		}
	}
	_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), request("api", desc("user=a")))
	if status.Code(err) != codes.Internal {
		t.Fatalf("a panicking handler returned %v, want Internal", err)
	}
	// The server survived the panic.
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("server down after a panic: %v", err)
	}
}
