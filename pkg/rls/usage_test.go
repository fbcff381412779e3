package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/envoyflows"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestUsageFlowsMatchTheReference replays the calls Envoy makes for limits
// charged after the response, on the memory store, and wants
// envoyproxy/ratelimit's numbers: with a native file that charges always
// (fixed windows and leaky buckets alike), and with the reference's file
// read as the reference reads it.
func TestUsageFlowsMatchTheReference(t *testing.T) {
	reference := descriptors.Options{RateLimitAlgorithm: limit.FixedWindow, Charge: descriptors.ChargeAlways, Leaf: true}
	for _, tc := range []struct {
		name string
		opts descriptors.Options
		yaml string
	}{
		{"native fixed windows", descriptors.Options{}, envoyflows.NativeConfig},
		{"native leaky buckets", descriptors.Options{}, "charge: always\n" + envoyflows.Config},
		{"the reference's defaults", reference, envoyflows.Config},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := tc.opts.Parse(descriptors.Source{Name: "usage.yaml", Data: []byte(tc.yaml)})
			if err != nil {
				t.Fatal(err)
			}
			envoyflows.Expect(t, func() envoyflows.Call {
				svc, _ := newService(t, Options{Config: cfg, DynamicMetadata: true})
				return svc.ShouldRateLimit
			}, 0)
		})
	}
}

// TestChargeAdmittedKeepsTheRequestRule: without charge: always, a charge
// that does not fit is refused as a request is, and charges nothing: the
// rule for request limits, unchanged.
func TestChargeAdmittedKeepsTheRequestRule(t *testing.T) {
	svc, _ := newService(t, Options{Config: loadConfig(t, envoyflows.Config)})
	if n, err := envoyflows.TokenBudget(context.Background(), svc.ShouldRateLimit); err != nil || n != 6 {
		t.Fatalf("token budget with charge: admitted: %d admitted (%v), want all 6", n, err)
	}
}

// TestChargeAlwaysCheckReportsDebt: a check past a budget says for how
// long: OVER_LIMIT, no remaining, the time until it is back within, and
// Retry-After to match.
func TestChargeAlwaysCheckReportsDebt(t *testing.T) {
	svc, clk := newService(t, Options{Config: loadConfig(t, `
domain: tok
charge: always
descriptors:
  - key: user
    name: tokens
    leaky_bucket: {size: 1000, drip_rate: 1s, drip_size: 100}
`)})
	ctx := context.Background()
	for _, step := range []struct {
		hits uint64
		want string
	}{
		{0, "OK [OK tokens 100/SECOND left=1000 reset=0s] X-RateLimit-Remaining=1000 X-RateLimit-Clear=0"},
		{1500, "OVER_LIMIT [OVER_LIMIT tokens 100/SECOND left=0 reset=5s] X-RateLimit-Remaining=0 X-RateLimit-Clear=15 X-RateLimit-Reset=5 Retry-After=5"},
		{0, "OVER_LIMIT [OVER_LIMIT tokens 100/SECOND left=0 reset=5s] X-RateLimit-Remaining=0 X-RateLimit-Clear=15 X-RateLimit-Reset=5 Retry-After=5"},
	} {
		resp, err := svc.ShouldRateLimit(ctx, request("tok", withHits(desc("user=a"), step.hits, false)))
		if err != nil {
			t.Fatal(err)
		}
		if got := render(resp); got != step.want {
			t.Fatalf("hits %d:\n got %s\nwant %s", step.hits, got, step.want)
		}
	}
	clk.now = clk.now.Add(5 * 1e9)
	resp, _ := svc.ShouldRateLimit(ctx, request("tok", withHits(desc("user=a"), 0, false)))
	if got, want := render(resp), "OK [OK tokens 100/SECOND left=0 reset=10s] X-RateLimit-Remaining=0 X-RateLimit-Clear=10"; got != want {
		t.Fatalf("5s later:\n got %s\nwant %s", got, want)
	}
}

// TestQuotaMode: quota descriptors over their limit reject the request only
// when all are over; a regular descriptor over its limit still does; a
// request the quota rule rejects charges its other limits nothing.
func TestQuotaMode(t *testing.T) {
	cfg := loadConfig(t, `
domain: q
descriptors:
  - key: backend
    value: a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: backend
    value: b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 10}
`)
	svc, _ := newService(t, Options{Config: cfg})
	ctx := context.Background()
	call := func(descs ...string) string {
		req := request("q")
		for _, d := range descs {
			req.Descriptors = append(req.Descriptors, desc(d))
		}
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes := resp.GetOverallCode().String()
		for _, st := range resp.GetStatuses() {
			codes += fmt.Sprintf(" %s/%d", st.GetCode(), st.GetLimitRemaining())
		}
		return codes
	}
	steps := []struct {
		descs []string
		want  string
	}{
		{[]string{"backend=a", "backend=b", "client=x"}, "OK OK/0 OK/0 OK/9"},
		{[]string{"backend=a", "backend=b", "client=x"}, "OVER_LIMIT OVER_LIMIT/0 OVER_LIMIT/0 OK/9"}, // both quotas over
		{[]string{"backend=a", "client=x"}, "OVER_LIMIT OVER_LIMIT/0 OK/9"},                           // the only quota is over
		{[]string{"client=x"}, "OK OK/8"},                                                             // the rejected requests were not charged to client=x
	}
	for i, st := range steps {
		if got := call(st.descs...); got != st.want {
			t.Fatalf("step %d %v: %s, want %s", i, st.descs, got, st.want)
		}
	}
	// One quota with room lets the request pass, though the other is over.
	svc2, _ := newService(t, Options{Config: cfg})
	svc = svc2
	call("backend=a")
	if got := call("backend=a", "backend=b"); got != "OK OVER_LIMIT/0 OK/0" {
		t.Fatalf("one quota over, one with room: %s, want OK", got)
	}
}

// TestReferenceHeaders: -response-headers envoyproxy sends the reference's
// three headers of the descriptor closest to its limit, on OK as well,
// the reset being the seconds to the fixed window's end; a descriptor over
// a limit not in quota mode takes over.
func TestReferenceHeaders(t *testing.T) {
	cfg, _, err := descriptors.Options{RateLimitAlgorithm: limit.FixedWindow, Leaf: true, Charge: descriptors.ChargeAlways}.Parse(descriptors.Source{Name: "h.yaml", Data: []byte(`
domain: h
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 3}
`)})
	if err != nil {
		t.Fatal(err)
	}
	svc, clk := newService(t, Options{Config: cfg, Headers: EnvoyproxyHeaders, ReferenceHeaders: ReferenceHeaderNames{Reset: "X-Reset"}})
	clk.now = t0.Truncate(time.Minute).Add(20*time.Second + 300*time.Millisecond) // 39.7s to the minute's end
	ctx := context.Background()
	headers := func(descs ...string) string {
		req := request("h")
		for _, d := range descs {
			req.Descriptors = append(req.Descriptors, desc(d))
		}
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, h := range resp.GetResponseHeadersToAdd() {
			hs = append(hs, h.GetKey()+"="+h.GetValue())
		}
		return resp.GetOverallCode().String() + " " + strings.Join(hs, " ")
	}
	if got := headers("a=1", "b=1"); !strings.HasPrefix(got, "OK RateLimit-Limit=3 RateLimit-Remaining=2 X-Reset=") {
		t.Fatalf("two descriptors: %s, want b's figures", got)
	}
	// b is closest to its limit (1 of 3 left, against a's 3 of 5).
	got := headers("a=1", "b=1")
	if !strings.HasPrefix(got, "OK RateLimit-Limit=3 RateLimit-Remaining=1 X-Reset=") {
		t.Fatalf("two descriptors: %s, want b's figures", got)
	}
	for range 4 {
		headers("a=1")
	}
	if got, want := headers("a=1", "b=1"), "OVER_LIMIT RateLimit-Limit=5 RateLimit-Remaining=0 X-Reset=40"; got != want {
		t.Fatalf("a over: %s, want %s", got, want)
	}
}

// TestExplainAndBucketsShowDebt: POST /explain and GET /buckets give how
// far past its limit a budget counts, and when it is back within.
func TestExplainAndBucketsShowDebt(t *testing.T) {
	svc, _ := newService(t, Options{Config: loadConfig(t, `
domain: tok
charge: always
descriptors:
  - key: user
    fixed_window: {limit: 1000, window: 1m}
`)})
	ctx := context.Background()
	svc.ShouldRateLimit(ctx, request("tok", withHits(desc("user=a"), 1500, false)))
	b, err := svc.Buckets(ctx, "tok", [][]descriptors.Entry{{{Key: "user", Value: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	st := b.Descriptors[0].Buckets[0]
	wantBack := (time.Minute - time.Duration(t0.UnixNano()%int64(time.Minute))).String()
	if st.Debt != 500 || st.BackWithin != wantBack || st.AdmitsOne || st.Remaining != 0 {
		t.Fatalf("GET /buckets: %+v, want a debt of 500 back within %s", st, wantBack)
	}
	e, err := svc.Explain(ctx, request("tok", withHits(desc("user=a"), 0, false)))
	if err != nil {
		t.Fatal(err)
	}
	x := e.Descriptors[0].Walk[0].Limits[0]
	if bs := x.Bucket.State; bs.Debt != 500 || bs.BackWithin != wantBack || bs.Admits || e.Code != "OVER_LIMIT" || x.Charge != "always" {
		t.Fatalf("POST /explain: %+v (charge %q), code %s, want a debt of 500 back within %s, OVER_LIMIT", bs, x.Charge, e.Code, wantBack)
	}
}

// TestOverLimitCacheLeavesChargesToTheStore: with the over-limit cache
// on, a charge of a limit that charges always still reaches the store when
// the budget is over (it must be recorded), and a check after the debt has
// gone passes: the cache hides neither.
func TestOverLimitCacheLeavesChargesToTheStore(t *testing.T) {
	svc, clk := newService(t, Options{OverLimitCacheSize: 1000, Config: loadConfig(t, `
domain: tok
charge: always
descriptors:
  - key: user
    leaky_bucket: {size: 1000, drip_rate: 1s, drip_size: 100}
`)})
	ctx := context.Background()
	for _, hits := range []uint64{1500, 10, 10} {
		if _, err := svc.ShouldRateLimit(ctx, request("tok", withHits(desc("user=a"), hits, false))); err != nil {
			t.Fatal(err)
		}
	}
	b, err := svc.Buckets(ctx, "tok", [][]descriptors.Entry{{{Key: "user", Value: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := b.Descriptors[0].Buckets[0].Debt; d != 520 {
		t.Fatalf("debt %d, want 520: every charge recorded", d)
	}
	clk.now = clk.now.Add(6 * time.Second) // 600 leaked: back within
	resp, err := svc.ShouldRateLimit(ctx, request("tok", withHits(desc("user=a"), 0, false)))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a check once the debt has leaked: %v (%v), want OK", resp.GetOverallCode(), err)
	}
}
