package rls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// step is one call at t0+at and its rendered response.
type step struct {
	at   time.Duration
	req  *rlsv3.RateLimitRequest
	want string
}

func runSteps(t *testing.T, svc *Service, c *clock, steps []step) {
	t.Helper()
	for i, st := range steps {
		c.now = t0.Add(st.at)
		resp, err := svc.ShouldRateLimit(context.Background(), st.req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := render(resp); got != st.want {
			t.Fatalf("step %d (t0+%s):\ngot  %s\nwant %s", i, st.at, got, st.want)
		}
	}
}

func TestHierarchyAndAllOrNothing(t *testing.T) {
	svc, c := newService(t, Options{})
	trade := request("api", desc("user=alice", "action=trade"))
	runSteps(t, svc, c, []step{
		{0, trade, "OK [OK trades 30/MINUTE left=2 reset=2s] X-RateLimit-Remaining=2 X-RateLimit-Clear=2"},
		{0, trade, "OK [OK trades 30/MINUTE left=1 reset=4s] X-RateLimit-Remaining=1 X-RateLimit-Clear=4"},
		{0, trade, "OK [OK trades 30/MINUTE left=0 reset=6s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6"},
		{0, trade, "OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=2s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6 X-RateLimit-Reset=2 Retry-After=2"},
		{0, trade, "OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=2s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6 X-RateLimit-Reset=2 Retry-After=2"},
		// The rejected trades did not charge the user level: 3 used, not 5.
		{0, request("api", desc("user=alice")), "OK [OK 1/SECOND left=6 reset=4s] X-RateLimit-Remaining=6 X-RateLimit-Clear=4"},
		{500 * time.Millisecond, trade, "OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=1.5s] X-RateLimit-Remaining=0 X-RateLimit-Clear=5.5 X-RateLimit-Reset=1.5 Retry-After=2"},
		{2 * time.Second, trade, "OK [OK trades 30/MINUTE left=0 reset=6s] X-RateLimit-Remaining=0 X-RateLimit-Clear=6"},
	})
}

func TestStatusesAndHeaders(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
	}{
		{"unknown domain", []step{{0, request("web", desc("user=alice")), "OK [OK]"}}},
		{"descriptor matching nothing", []step{
			{0, request("api", desc("nothing=here"), desc("user=bob")), "OK [OK; OK 1/SECOND left=9 reset=1s] X-RateLimit-Remaining=9 X-RateLimit-Clear=1"},
		}},
		{"allow list", []step{{0, request("api", desc("client=internal")), "OK [OK]"}}},
		{"deny list", []step{
			{0, request("api", desc("client=abuser")), "OVER_LIMIT [OVER_LIMIT 0/SECOND left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=0 X-RateLimit-Reset=1 Retry-After=1"},
		}},
		{"shadow limit never blocks nor shows", []step{
			{0, request("api", desc("plan=free")), "OK [OK]"},
			{0, request("api", desc("plan=free")), "OK [OK]"},
		}},
		{"a rejected descriptor charges no other", []step{
			{0, request("api", desc("user=bob"), desc("client=abuser")),
				"OVER_LIMIT [OK 1/SECOND left=10 reset=0s; OVER_LIMIT 0/SECOND left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=0 X-RateLimit-Reset=1 Retry-After=1"},
			{0, request("api", desc("user=bob")), "OK [OK 1/SECOND left=9 reset=1s] X-RateLimit-Remaining=9 X-RateLimit-Clear=1"},
		}},
		{"hits", []step{
			{0, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=dan")}, HitsAddend: 4},
				"OK [OK 1/SECOND left=6 reset=4s] X-RateLimit-Remaining=6 X-RateLimit-Clear=4"},
			// A descriptor's own hits_addend of 0 checks without charging.
			{0, request("api", withHits(desc("user=dan"), 0, false)), "OK [OK 1/SECOND left=6 reset=4s] X-RateLimit-Remaining=6 X-RateLimit-Clear=4"},
			// It overrides the request's hits_addend.
			{0, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("user=dan"), 5, false)}, HitsAddend: 1},
				"OK [OK 1/SECOND left=1 reset=9s] X-RateLimit-Remaining=1 X-RateLimit-Clear=9"},
			{0, request("api", withHits(desc("user=dan"), 2, false)), "OVER_LIMIT [OVER_LIMIT 1/SECOND left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=9 X-RateLimit-Reset=1 Retry-After=1"},
			// Negative hits give requests back.
			{0, request("api", withHits(desc("user=dan"), 4, true)), "OK [OK 1/SECOND left=5 reset=5s] X-RateLimit-Remaining=5 X-RateLimit-Clear=5"},
			// A request hits_addend of 0 means 1.
			{0, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=dan")}, HitsAddend: 0},
				"OK [OK 1/SECOND left=4 reset=6s] X-RateLimit-Remaining=4 X-RateLimit-Clear=6"},
		}},
		{"a bucket in two descriptors is charged for both", []step{
			{0, request("api", desc("user=eve"), desc("user=eve", "action=trade")),
				"OK [OK 1/SECOND left=8 reset=2s; OK trades 30/MINUTE left=2 reset=2s] X-RateLimit-Remaining=2 X-RateLimit-Clear=2"},
		}},
		{"limit sent by Envoy", []step{
			{0, request("api", withLimit(desc("user=carol"), 1, typev3.RateLimitUnit_MINUTE)),
				"OK [OK 1/MINUTE left=0 reset=1m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60"},
			{0, request("api", withLimit(desc("user=carol"), 1, typev3.RateLimitUnit_MINUTE)),
				"OVER_LIMIT [OVER_LIMIT 1/MINUTE left=0 reset=1m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60 X-RateLimit-Reset=60 Retry-After=60"},
			// It had its own bucket: the configured one is untouched.
			{0, request("api", desc("user=carol")), "OK [OK 1/SECOND left=9 reset=1s] X-RateLimit-Remaining=9 X-RateLimit-Clear=1"},
		}},
		{"limit sent by Envoy with a multiplier", []step{
			{0, request("api", func() *ratelimitv3.RateLimitDescriptor {
				d := withLimit(desc("user=carol"), 10, typev3.RateLimitUnit_SECOND)
				d.Limit.UnitMultiplier = wrapperspb.UInt32(30)
				return d
			}()), "OK [OK 10/SECONDx30 left=9 reset=3s] X-RateLimit-Remaining=9 X-RateLimit-Clear=3"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc, c := newService(t, Options{})
			runSteps(t, svc, c, tc.steps)
		})
	}
}

func TestNoHeaders(t *testing.T) {
	svc, c := newService(t, Options{Headers: NoHeaders})
	runSteps(t, svc, c, []step{
		{0, request("api", desc("client=abuser")), "OVER_LIMIT [OVER_LIMIT 0/SECOND left=0 reset=1s]"},
	})
}

func TestEnvoyHeaders(t *testing.T) {
	svc, c := newService(t, Options{Headers: EnvoyHeaders})
	runSteps(t, svc, c, []step{
		{0, request("api", desc("user=a")), "OK [OK 1/SECOND left=9 reset=1s] X-RateLimit-Clear=1"},
		{0, request("api", desc("client=abuser")), "OVER_LIMIT [OVER_LIMIT 0/SECOND left=0 reset=1s] X-RateLimit-Clear=0 Retry-After=1"},
	})
}

func TestInvalidRequests(t *testing.T) {
	unknownUnit := withLimit(desc("user=a"), 1, typev3.RateLimitUnit_UNKNOWN)
	zeroMultiplier := withLimit(desc("user=a"), 1, typev3.RateLimitUnit_SECOND)
	zeroMultiplier.Limit.UnitMultiplier = wrapperspb.UInt32(0)
	cases := []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{request("", desc("user=a")), "domain is empty"},
		{request("api"), "request has no descriptors"},
		{request("api", desc("user=a"), desc()), "descriptors[1] has no entries"},
		{request("api", &ratelimitv3.RateLimitDescriptor{}), "descriptors[0] has no entries"},
		{request("api", desc("user=a", "=x")), "descriptors[0].entries[1] has an empty key"},
		{request("api", unknownUnit), "descriptors[0].limit has unit UNKNOWN"},
		{request("api", withLimit(desc("user=a"), 1, typev3.RateLimitUnit(42))), "descriptors[0].limit has unit 42"},
		{request("api", zeroMultiplier), "descriptors[0].limit has unit_multiplier 0"},
		// Malformed requests are refused before the domain is looked up.
		{request("no-such-domain", desc("=x")), "descriptors[0].entries[0] has an empty key"},
	}
	svc, _ := newService(t, Options{})
	for _, c := range cases {
		_, err := svc.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%v: got %v, want InvalidArgument with %q", c.req, err, c.want)
		}
	}
}

// storeFunc adapts a function to the Store interface.
type storeFunc func(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error

func (f storeFunc) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	return f(ctx, now, buckets, results)
}

// TestStoreFailureIsUnavailable: a store failure is Unavailable, saying
// what failed but never where: no address, no text of the store's own.
func TestStoreFailureIsUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379},
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("redis: %w", refused), "connection refused"},
		{&net.OpError{Op: "read", Net: "tcp", Addr: refused.Addr, Err: errors.New("reset by 10.1.2.3:6379")}, "connection failed"},
		{&net.OpError{Op: "read", Net: "tcp", Addr: refused.Addr, Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, "unavailable: connection reset by peer"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "redis.internal.example"}}, "cannot connect"},
		{&net.OpError{Op: "dial", Net: "tcp", Addr: refused.Addr, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ETIMEDOUT}}, "did not answer in time"},
		{fmt.Errorf("i/o on 10.1.2.3:6379: %w", os.ErrDeadlineExceeded), "did not answer in time"},
		{errors.New("WRONGPASS invalid password hunter2 for 10.1.2.3:6379"), "rate-limit store unavailable"},
	} {
		failing := storeFunc(func(context.Context, time.Time, []limit.Bucket, []limit.Result) error { return c.err })
		svc, _ := newService(t, Options{Store: failing})
		_, err := svc.ShouldRateLimit(context.Background(), request("api", desc("user=a")))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want Unavailable saying %q", c.err, err, c.want)
		}
		for _, secret := range []string{"10.1.2.3", "6379", "hunter2", "WRONGPASS", "internal.example"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%v: the caller is told %q", c.err, err)
			}
		}
	}
}

func TestDeadlineIsHonoured(t *testing.T) {
	called := false
	store := storeFunc(func(context.Context, time.Time, []limit.Bucket, []limit.Result) error {
		called = true
		return nil
	})
	svc, _ := newService(t, Options{Store: store})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	if _, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a"))); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("expired deadline: got %v, want DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a"))); status.Code(err) != codes.Canceled {
		t.Errorf("canceled call: got %v, want Canceled", err)
	}
	if called {
		t.Error("the store was asked after the call had ended")
	}
}

func TestStoreErrorAfterDeadlineIsDeadlineExceeded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	store := storeFunc(func(ctx context.Context, _ time.Time, _ []limit.Bucket, _ []limit.Result) error {
		cancel() // the call ends while the store works
		return ctx.Err()
	})
	svc, _ := newService(t, Options{Store: store})
	if _, err := svc.ShouldRateLimit(ctx, request("api", desc("user=a"))); status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want Canceled", err)
	}
}

func TestNoConfigAnswersOK(t *testing.T) {
	svc, err := New(Options{Store: storeFunc(func(context.Context, time.Time, []limit.Bucket, []limit.Result) error {
		return errors.New("must not be called")
	})})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := svc.ShouldRateLimit(context.Background(), request("api", desc("user=a")))
	if err != nil || render(resp) != "OK [OK]" {
		t.Fatalf("got %v, %v", resp, err)
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a store succeeded")
	}
}

func TestSetConfigTakesEffect(t *testing.T) {
	svc, _ := newService(t, Options{})
	svc.SetConfig(loadConfig(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 0}\n"))
	resp, err := svc.ShouldRateLimit(context.Background(), request("api", desc("user=a")))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("got %v, %v; want OVER_LIMIT from the new config", render(resp), err)
	}
}

func TestSecondsFormat(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
		sec  int64
	}{
		{0, "0", 1},
		{time.Nanosecond, "0.001", 1},
		{755 * time.Millisecond, "0.755", 1},
		{1500 * time.Millisecond, "1.5", 2},
		{2 * time.Second, "2", 2},
		{2*time.Second + time.Microsecond, "2.001", 3},
		{100 * time.Millisecond, "0.1", 1},
		{time.Hour, "3600", 3600},
	}
	for _, c := range cases {
		if got := string(appendSeconds(nil, c.d)); got != c.want {
			t.Errorf("appendSeconds(%s) = %q, want %q", c.d, got, c.want)
		}
		if got := wholeSeconds(c.d); got != c.sec {
			t.Errorf("wholeSeconds(%s) = %d, want %d", c.d, got, c.sec)
		}
	}
}
