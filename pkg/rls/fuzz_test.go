package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// fuzzSeeds are requests of every kind: plain, merged, peeks, refunds,
// overrides good and bad, malformed, and one over each cap.
func fuzzSeeds() []*rlsv3.RateLimitRequest {
	long := strings.Repeat("x", DefaultMaxEntryBytes+1)
	manyEntries := desc()
	for i := range DefaultMaxEntries + 1 {
		manyEntries.Entries = append(manyEntries.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: fmt.Sprint("k", i), Value: "v"})
	}
	merged := request("api")
	for i := range 20 { // past scanBuckets: the map merges
		merged.Descriptors = append(merged.Descriptors, desc(fmt.Sprintf("user=u%d", i%12), "action=trade"))
	}
	badMultiplier := withLimit(desc("user=d"), 5, typev3.RateLimitUnit_SECOND)
	badMultiplier.Limit.UnitMultiplier = wrapperspb.UInt32(0)
	huge := request("api", desc("hot=a"))
	huge.HitsAddend = 1<<32 - 1
	return []*rlsv3.RateLimitRequest{
		request("api", desc("user=a", "action=trade")),
		request("api", desc("client=abuser"), withHits(desc("user=b"), 3, true), desc("client=internal")),
		request("api", withHits(desc("user=a"), 0, false), desc("plan=free")),
		request("api", withLimit(desc("user=c"), 5, typev3.RateLimitUnit_MINUTE), withLimit(desc("nothing=here"), 1, typev3.RateLimitUnit_YEAR)),
		request("api", withLimit(desc("user=c"), 5, typev3.RateLimitUnit_UNKNOWN)),
		request("api", badMultiplier),
		request("api", withHits(desc("hot=a"), 1<<63, false), withHits(desc("hot=a"), 1<<63, false)),
		huge,
		merged,
		request("other", desc("user=a")),
		request("", desc("user=a")),
		request("api"),
		request("api", desc()),
		request("api", desc("=x")),
		// Over each cap.
		request("api", descs(DefaultMaxDescriptors+1, "user=a")...),
		request("api", manyEntries),
		request("api", desc("user=a", long+"=v")),
		request("api", desc("user="+long)),
		request(long, desc("user=a")),
		// Windows, several limits per node, a limit sent by Envoy that
		// becomes a sliding window, refunds and huge hits.
		request("win", desc("user=a"), withLimit(desc("user=b"), 2, typev3.RateLimitUnit_SECOND)),
		request("win", withHits(desc("user=a"), 2, true), withHits(desc("user=a"), 1<<40, false)),
	}
}

// fuzzWindows is a domain of windows beside the test config's.
const fuzzWindows = `
domain: win
rate_limit_algorithm: sliding_window
descriptors:
  - key: user
    limits:
      - sliding_window: {limit: 3, window: 10s, resolution: 1s}
      - fixed_window: {limit: 5, window: 1m}
      - rate_limit: {unit: second, requests_per_unit: 4}
      - leaky_bucket: {size: 2, drip_rate: 1s}
        shadow_mode: true
`

// FuzzShouldRateLimit: any bytes, read as a request (protobuf, or the
// JSON of /json), are answered with one status per descriptor or refused
// as InvalidArgument; never a panic, never another code.
func FuzzShouldRateLimit(f *testing.F) {
	for _, req := range fuzzSeeds() {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, req := range fuzzSeeds()[:4] {
		b, err := protojson.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// The memory store, the test config and the over-limit cache: the
	// whole path of a call.
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "test.yaml", Data: []byte(testConfig)}, descriptors.Source{Name: "win.yaml", Data: []byte(fuzzWindows)})
	if err != nil {
		f.Fatal(err)
	}
	svc, clk := newService(f, Options{Config: cfg, OverLimitCacheSize: 1000, OverLimitCacheBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil && protojson.Unmarshal(data, &req) != nil {
			return
		}
		clk.now = clk.now.Add(1e6) // buckets drain between calls, as in life
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
				t.Fatalf("%v: %v, want a response or InvalidArgument saying why", &req, err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		if c := resp.GetOverallCode(); c != rlsv3.RateLimitResponse_OK && c != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("overall code %v", c)
		}
		for i, st := range resp.GetStatuses() {
			if c := st.GetCode(); c != rlsv3.RateLimitResponse_OK && c != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("statuses[%d] has code %v", i, c)
			}
		}
	})
}
