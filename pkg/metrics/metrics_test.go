package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

func TestCallsAndDecisions(t *testing.T) {
	m := New(0.8)
	m.Call("", "OK", 0)
	m.Call("api", "OVER_LIMIT", 0)
	m.Call("api", "OVER_LIMIT", 0)
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(
		"domain: api\ndescriptors:\n  - key: user\n    name: trades\n    leaky_bucket: {size: 10, drip_rate: 1s}\n")})
	if err != nil {
		t.Fatal(err)
	}
	levels := cfg.Domain("api").Resolve([]descriptors.Entry{{Key: "user", Value: "a"}}, nil, nil)
	if len(levels) != 1 {
		t.Fatalf("levels: %v", levels)
	}
	rule := levels[0].Rule
	m.Limit("api", rule, "api|user=a", 1, &leaky.Result{Admitted: true, Remaining: 2}, false) // 8 of 10 used: not past 0.8
	m.Limit("api", rule, "api|user=a", 1, &leaky.Result{Admitted: true, Remaining: 1}, false) // 9 of 10: near
	m.Limit("api", rule, "api|user=a", 1, &leaky.Result{}, false)
	m.Limit("api", rule, "api|user=a", 1, &leaky.Result{}, true)
	m.WatchBuckets(func() int { return 7 }, func() int64 { return 700 }, func() uint64 { return 3 })

	want := `
# HELP envoy_rls_calls_total ShouldRateLimit calls, by domain ("(unknown)" for domains not in the config) and outcome: OK, OVER_LIMIT or a gRPC error code.
# TYPE envoy_rls_calls_total counter
envoy_rls_calls_total{code="OK",domain="(unknown)"} 1
envoy_rls_calls_total{code="OVER_LIMIT",domain="api"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "envoy_rls_calls_total"); err != nil {
		t.Error(err)
	}
	for series, n := range map[string]float64{
		"admitted": 2, "near_limit": 1, "over_limit": 1, "shadow_would_block": 1,
	} {
		if got := testutil.ToFloat64(m.decisions.vec.WithLabelValues("api", "trades", series)); got != n {
			t.Errorf("decision %s: %v, want %v", series, got, n)
		}
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "envoy_rls_memory_buckets", "envoy_rls_memory_bytes", "envoy_rls_memory_evictions_total"); err != nil || n != 3 {
		t.Errorf("memory store series: %d (%v), want 3", n, err)
	}
}
