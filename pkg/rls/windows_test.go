package rls

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// t0 is 07:08:09: a fixed window of a minute ends 51s after it.
const windowsTestConfig = `
domain: api
descriptors:
  - key: user
    limits:
      - sliding_window: {limit: 3, window: 10s, resolution: 1s}
        name: burst
      - fixed_window: {limit: 5, window: 1m}
        name: minute
`

// TestSeveralLimitsPerNode steps through a node with a sliding and a fixed
// window: the most restrictive answers, and current_limit names the limit
// that decided. An OK status's reset is when every limit is clear; the
// IETF RateLimit field's t, when the policy it names is.
func TestSeveralLimitsPerNode(t *testing.T) {
	svc, c := newService(t, Options{Config: loadConfig(t, windowsTestConfig), Headers: IETFHeaders})
	user := request("api", desc("user=a"))
	const policy = ` RateLimit-Policy="burst";q=3;w=10, "minute";q=5;w=60`
	runSteps(t, svc, c, []step{
		{0, user, `OK [OK burst 3/SECONDx10 left=2 reset=51s]` + policy + ` RateLimit="burst";r=2;t=10`},
		{0, user, `OK [OK burst 3/SECONDx10 left=1 reset=51s]` + policy + ` RateLimit="burst";r=1;t=10`},
		{0, user, `OK [OK burst 3/SECONDx10 left=0 reset=51s]` + policy + ` RateLimit="burst";r=0;t=10`},
		// The burst window is full until its hits leave, 10s on; the
		// minute's window has room.
		{time.Second, user, `OVER_LIMIT [OVER_LIMIT burst 3/SECONDx10 left=0 reset=9s]` + policy + ` RateLimit="burst";r=0;t=9 Retry-After=9`},
		{10 * time.Second, user, `OK [OK minute 5/MINUTE left=1 reset=41s]` + policy + ` RateLimit="minute";r=1;t=41`},
		{11 * time.Second, user, `OK [OK minute 5/MINUTE left=0 reset=40s]` + policy + ` RateLimit="minute";r=0;t=40`},
		// Now the minute decides, until its window ends at 07:09:00; the
		// rejected call charged neither window.
		{12 * time.Second, user, `OVER_LIMIT [OVER_LIMIT minute 5/MINUTE left=0 reset=39s]` + policy + ` RateLimit="minute";r=0;t=39 Retry-After=39`},
		{51 * time.Second, user, `OK [OK burst 3/SECONDx10 left=2 reset=1m0s]` + policy + ` RateLimit="burst";r=2;t=10`},
	})
}

// TestEnvoyLimitFollowsTheFile sends a limit from Envoy's route to a domain
// whose file counts in fixed windows: it counts in fixed windows too.
func TestEnvoyLimitFollowsTheFile(t *testing.T) {
	cfg := loadConfig(t, "domain: api\nrate_limit_algorithm: fixed_window\ndescriptors:\n  - key: user\n")
	svc, c := newService(t, Options{Config: cfg})
	d := func() *ratelimitv3.RateLimitDescriptor {
		return withLimit(desc("user=a"), 2, typev3.RateLimitUnit_MINUTE)
	}
	runSteps(t, svc, c, []step{
		{0, request("api", d()), `OK [OK 2/MINUTE left=1 reset=51s] X-RateLimit-Remaining=1 X-RateLimit-Clear=51`},
		{0, request("api", d()), `OK [OK 2/MINUTE left=0 reset=51s] X-RateLimit-Remaining=0 X-RateLimit-Clear=51`},
		{50 * time.Second, request("api", d()), `OVER_LIMIT [OVER_LIMIT 2/MINUTE left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=1 X-RateLimit-Reset=1 Retry-After=1`},
		// A new window: the whole limit again, as envoyproxy/ratelimit counts.
		{51 * time.Second, request("api", d()), `OK [OK 2/MINUTE left=1 reset=1m0s] X-RateLimit-Remaining=1 X-RateLimit-Clear=60`},
	})
}

// TestWindowsObservedAndOverJSON: metrics see each limit of a node under
// its own label, and /json answers windows as gRPC does.
func TestWindowsObservedAndOverJSON(t *testing.T) {
	rec := &recorder{}
	cfg := loadConfig(t, windowsTestConfig+"      - leaky_bucket: {size: 100, drip_rate: 1s}\n")
	svc, _ := newService(t, Options{Config: cfg, Observer: rec})
	h := HTTPHandler(svc, nil, nil, true)
	var last string
	for range 4 {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}`)))
		last = fmt.Sprint(rr.Code, " ", rr.Body.String())
	}
	if !strings.HasPrefix(last, "429 ") || !strings.Contains(last, `"name":"burst"`) {
		t.Errorf("fourth call over /json: %s, want 429 naming the burst window", last)
	}
	want := []string{"api burst admitted=true shadow=false", "api minute admitted=true shadow=false", "api user/limits[2] admitted=true shadow=false"}
	if fmt.Sprint(rec.limits[:3]) != fmt.Sprint(want) {
		t.Errorf("observed %q, want %q first", rec.limits, want)
	}
}
