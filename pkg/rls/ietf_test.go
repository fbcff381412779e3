package rls

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

func TestIETFHeaders(t *testing.T) {
	svc, c := newService(t, Options{Headers: IETFHeaders})
	runSteps(t, svc, c, []step{
		// Both levels are policies; the trade bucket (3, one every 2s)
		// binds: 2 left, empty in 2s.
		{0, request("api", desc("user=a", "action=trade")),
			`OK [OK trades 30/MINUTE left=2 reset=2s] RateLimit-Policy="user";q=10;w=10, "trades";q=3;w=6 RateLimit="trades";r=2;t=2`},
		{0, request("api", desc("user=a", "action=trade"), desc("user=a", "action=trade")),
			`OK [OK trades 30/MINUTE left=0 reset=6s; OK trades 30/MINUTE left=0 reset=6s] RateLimit-Policy="user";q=10;w=10, "trades";q=3;w=6 RateLimit="trades";r=0;t=6`},
		// Over: t is when the request could pass, as Retry-After.
		{0, request("api", desc("user=a", "action=trade")),
			`OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=2s] RateLimit-Policy="user";q=10;w=10, "trades";q=3;w=6 RateLimit="trades";r=0;t=2 Retry-After=2`},
		{0, request("api", desc("client=abuser")),
			`OVER_LIMIT [OVER_LIMIT 0/SECOND left=0 reset=1s] RateLimit-Policy="client=abuser";q=0;w=1 RateLimit="client=abuser";r=0;t=1 Retry-After=1`},
		// A shadow limit is no policy: it never limits.
		{0, request("api", desc("plan=free")), `OK [OK]`},
	})
}

func TestPolicyNames(t *testing.T) {
	for name, want := range map[string]string{
		"burst":        `"burst"`,
		`say "hi"\now`: `"say \"hi\"\\now"`,
		"héllo\tx":     `"h??llo?x"`,
	} {
		if got := string(appendPolicyName(nil, &descriptors.Rule{Name: name})); got != want {
			t.Errorf("%q: %s, want %s", name, got, want)
		}
	}
	if got := string(appendPolicyName(nil, &descriptors.Rule{Path: "descriptors[1]"})); got != `"descriptors[1]"` {
		t.Errorf("unnamed: %s", got)
	}
}

func TestPolicyWindow(t *testing.T) {
	for _, c := range []struct {
		l    limit.Limit
		want int64
	}{
		{limit.Limit{Size: 100, DripRate: 600 * time.Millisecond, DripSize: 1}, 60}, // 100/minute
		{limit.Limit{Size: 10, DripRate: time.Second, DripSize: 3}, 4},
		{limit.Limit{Size: 0, DripRate: time.Second, DripSize: 1}, 1},
		{limit.Limit{Size: leaky.MaxSize, DripRate: leaky.MaxDripRate, DripSize: 1}, 9223372036},
		{limit.Limit{Algorithm: limit.SlidingWindow, Size: 5, Window: time.Hour, Resolution: time.Minute}, 3600},
		{limit.Limit{Algorithm: limit.FixedWindow, Size: 5, Window: 1500 * time.Millisecond}, 2},
	} {
		if got := policyWindow(c.l, time.Time{}); got != c.want {
			t.Errorf("%v: %d, want %d", c.l, got, c.want)
		}
	}
}

func TestOverLimitBody(t *testing.T) {
	cfg := loadConfig(t, `
domain: api
over_limit_body: "Too many requests; try again in {retry_after} s. ({retry_after})"
descriptors:
  - key: user
    leaky_bucket: {size: 1, drip_rate: 2500ms}
`)
	svc, c := newService(t, Options{Config: cfg})
	for i, want := range []string{"", "Too many requests; try again in 3 s. (3)"} {
		c.now = t0
		resp, err := svc.ShouldRateLimit(context.Background(), request("api", desc("user=a")))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(resp.GetRawBody()); got != want {
			t.Errorf("call %d (%v): raw_body %q, want %q", i+1, resp.GetOverallCode(), got, want)
		}
	}
}
