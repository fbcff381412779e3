package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// cpuTime returns the CPU time a process has used, from /proc.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc to read CPU time from: %v", err)
	}
	// The fields after the command name, which ends with ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// bomb is a request of n descriptors that all reach the same buckets,
// user=alice and user=alice/action=trade of the default config.
func bomb(n int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "api"}
	for range n {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: "user", Value: "alice"}, {Key: "action", Value: "trade"}}})
	}
	return req
}

// TestDescriptorBomb sends requests of tens of thousands of descriptors to
// the real binary on each store: each is refused as InvalidArgument before
// any work, charges nothing, and costs the server little CPU (logged, for
// the README; not a timed check).
func TestDescriptorBomb(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []struct {
		name string
		args []string
	}{
		{"memory", nil},
		{"redis", []string{"-store", "redis", "-redis-url", srv.URL()}},
	} {
		t.Run(store.name, func(t *testing.T) {
			p := startBinary(t, store.args...)
			conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlsv3.NewRateLimitServiceClient(conn)
			call := func(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				return client.ShouldRateLimit(ctx, req)
			}
			warmedUp := time.Now()
			if _, err := call(bomb(1)); err != nil { // warm up the connection
				t.Fatal(err)
			}
			for _, n := range []int{10_000, 40_000, 80_000} {
				before := cpuTime(t, p.cmd.Process.Pid)
				_, err := call(bomb(n))
				used := cpuTime(t, p.cmd.Process.Pid) - before
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 64") {
					t.Fatalf("%d descriptors: %v, want InvalidArgument naming the cap of 64", n, err)
				}
				t.Logf("%s store: %d descriptors refused with %v of server CPU", store.name, n, used)
			}
			// Nothing was charged: the trade bucket (5, one more every 2s)
			// has 3 left after the two single calls, plus what dripped
			// meanwhile on a slow machine.
			dripped := int(time.Since(warmedUp) / (2 * time.Second))
			resp, err := call(bomb(1))
			if err != nil || len(resp.GetStatuses()) != 1 {
				t.Fatalf("after the bombs: %v %v", resp, err)
			}
			if left := int(resp.GetStatuses()[0].GetLimitRemaining()); left < 3 || left > min(3+dripped, 4) {
				t.Fatalf("after the bombs (%d drips): %v %v, want 3 left of the trade bucket (two single calls charged)", dripped, resp, err)
			}
		})
		srv.Client(t).FlushAll(context.Background())
	}
}
