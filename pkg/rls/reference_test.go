package rls

import (
	"context"
	"math"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// TestUnlimitedRemaining: an allow-listed descriptor reports the most a
// limit_remaining holds, as envoyproxy/ratelimit does (a client reads 0 as
// exhausted), also below a limited parent, with every failure mode.
func TestUnlimitedRemaining(t *testing.T) {
	cfg := loadConfig(t, testConfig+`  - key: team
    leaky_bucket: {size: 5, drip_rate: 1s}
    descriptors:
      - key: member
        value: lead
        rate_limit: {unlimited: true}
`)
	for _, mode := range []FailureMode{FailUnavailable, FailAllow, FailDeny} {
		store := Store(nil)
		if mode != FailUnavailable {
			store = failingStore(context.DeadlineExceeded)
		}
		svc, _ := newService(t, Options{Config: cfg, Store: store, FailureMode: mode})
		resp, err := svc.ShouldRateLimit(context.Background(),
			request("api", desc("client=internal"), desc("team=a", "member=lead"), desc("nothing=here")))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()
		if len(st) != 3 || st[0].GetLimitRemaining() != math.MaxUint32 || st[1].GetLimitRemaining() != math.MaxUint32 ||
			st[0].GetCurrentLimit() != nil || st[1].GetCode() != rlsv3.RateLimitResponse_OK || st[2].GetLimitRemaining() != 0 {
			t.Errorf("%v: %v, want the two allow-listed descriptors OK with %d remaining, and the unknown one with 0", mode, resp, uint32(math.MaxUint32))
		}
	}
}

// TestOverLimitCacheGivesTheOthersTheirFigures: when the over-limit cache
// rejects a request, its other descriptors still get their limit and what
// remains, from a check that charges nothing; a request of the cached
// descriptor alone costs the store nothing.
func TestOverLimitCacheGivesTheOthersTheirFigures(t *testing.T) {
	mem, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &countingStore{Store: mem}
	svc, _ := newService(t, Options{Store: store, OverLimitCacheSize: 100})
	call := func(req *rlsv3.RateLimitRequest) string {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return render(resp)
	}
	for range 4 {
		call(request("api", desc("client=abuser"))) // rejected, and cached
	}
	calls := store.calls.Load()
	call(request("api", desc("client=abuser")))
	if store.calls.Load() != calls {
		t.Fatalf("the cached descriptor alone asked the store")
	}
	got := call(request("api", desc("client=abuser"), desc("user=bob")))
	want := "OVER_LIMIT [OVER_LIMIT 0/SECOND left=0 reset=1s; OK 1/SECOND left=10 reset=0s]"
	if !strings.HasPrefix(got, want) || store.calls.Load() != calls+1 {
		t.Fatalf("got %s after %d more store calls\nwant %s after 1 (a check)", got, store.calls.Load()-calls, want)
	}
	// The check charged nothing.
	if got := call(request("api", desc("user=bob"))); !strings.HasPrefix(got, "OK [OK 1/SECOND left=9 reset=1s]") {
		t.Fatalf("bob afterwards: %s, want 9 left: the check charged nothing", got)
	}
}

// TestShadowBelowALimit: a shadow limit never rejects, but without
// match: leaf the level above it still counts (docs/migration.md).
func TestShadowBelowALimit(t *testing.T) {
	const tree = `descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: action
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 0}
`
	for match, want := range map[string]string{"all": "OVER_LIMIT", "leaf": "OK"} {
		svc, _ := newService(t, Options{Config: loadConfig(t, "domain: api\nmatch: "+match+"\n"+tree)})
		var got rlsv3.RateLimitResponse_Code
		for range 2 {
			resp, err := svc.ShouldRateLimit(context.Background(), request("api", desc("user=a", "action=x")))
			if err != nil {
				t.Fatal(err)
			}
			got = resp.GetOverallCode()
		}
		if got.String() != want {
			t.Errorf("match: %s, second call: %v, want %s", match, got, want)
		}
	}
}
