package metrics

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

func parseConfig(t *testing.T, files ...string) *descriptors.Config {
	t.Helper()
	var srcs []descriptors.Source
	for i := 0; i+1 < len(files); i += 2 {
		srcs = append(srcs, descriptors.Source{Name: files[i], Data: []byte(files[i+1])})
	}
	cfg, _, err := descriptors.Parse(srcs...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const limitsAPI = `domain: api
descriptors:
  - key: user
    name: per_user
    leaky_bucket: {size: 10, drip_rate: 100ms}
    descriptors:
      - key: action
        value: trade
        sliding_window: {limit: 60, window: 1m}
  - key: tenant
    limits:
      - {name: budget, fixed_window: {limit: 2000000, window: 720h}}
      - {name: budget, fixed_window: {limit: 1000000, window: 720h}}
`

// TestLimitGauges: each limit of the config in force is a series, by
// domain, label and algorithm; a reload that removes one removes its
// series, and before any config there are none.
func TestLimitGauges(t *testing.T) {
	m := New(0)
	var cfg atomic.Pointer[descriptors.Config]
	m.WatchLimits(cfg.Load)
	if n, err := testutil.GatherAndCount(m.Registry(), "envoy_rls_limit", "envoy_rls_limit_rate_per_second"); err != nil || n != 0 {
		t.Fatalf("before a config: %d series (%v)", n, err)
	}

	cfg.Store(parseConfig(t, "api.yaml", limitsAPI, "web.yaml", "domain: web\ndescriptors:\n  - {key: ip, rate_limit: {unit: minute, requests_per_unit: 120}}\n"))
	want := `
# HELP envoy_rls_limit Each limit of the config in force, in requests: a leaky bucket's size, a window's limit; by domain, limit (its name, or path in the config) and algorithm. Where several limits of a domain share a name and an algorithm, the smallest.
# TYPE envoy_rls_limit gauge
envoy_rls_limit{algorithm="fixed_window",domain="api",limit="budget"} 1e+06
envoy_rls_limit{algorithm="leaky_bucket",domain="api",limit="per_user"} 10
envoy_rls_limit{algorithm="leaky_bucket",domain="web",limit="ip"} 120
envoy_rls_limit{algorithm="sliding_window",domain="api",limit="user/action=trade"} 60
# HELP envoy_rls_limit_rate_per_second Each limit of the config in force as the requests per second it sustains: a leaky bucket's drip, a window's limit over its length (a calendar window's over its nominal period: a month is 30 days); labelled as envoy_rls_limit.
# TYPE envoy_rls_limit_rate_per_second gauge
envoy_rls_limit_rate_per_second{algorithm="fixed_window",domain="api",limit="budget"} 0.38580246913580246
envoy_rls_limit_rate_per_second{algorithm="leaky_bucket",domain="api",limit="per_user"} 10
envoy_rls_limit_rate_per_second{algorithm="leaky_bucket",domain="web",limit="ip"} 2
envoy_rls_limit_rate_per_second{algorithm="sliding_window",domain="api",limit="user/action=trade"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "envoy_rls_limit", "envoy_rls_limit_rate_per_second"); err != nil {
		t.Error(err)
	}

	// A reload without the web domain and the trade limit.
	cfg.Store(parseConfig(t, "api.yaml", strings.Split(limitsAPI, "    descriptors:")[0]+"  - key: tenant\n    name: budget\n    fixed_window: {limit: 5, window: 1h}\n"))
	want = `
# HELP envoy_rls_limit Each limit of the config in force, in requests: a leaky bucket's size, a window's limit; by domain, limit (its name, or path in the config) and algorithm. Where several limits of a domain share a name and an algorithm, the smallest.
# TYPE envoy_rls_limit gauge
envoy_rls_limit{algorithm="fixed_window",domain="api",limit="budget"} 5
envoy_rls_limit{algorithm="leaky_bucket",domain="api",limit="per_user"} 10
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "envoy_rls_limit"); err != nil {
		t.Error(err)
	}
}

// TestLimitGaugeCalendar: a calendar window's rate is its limit over its
// nominal period.
func TestLimitGaugeCalendar(t *testing.T) {
	m := New(0)
	cfg := parseConfig(t, "api.yaml", "domain: api\ndescriptors:\n  - {key: user, name: monthly, fixed_window: {limit: 2592000, calendar: month, time_zone: Europe/Berlin}}\n")
	m.WatchLimits(func() *descriptors.Config { return cfg })
	if v := gatherValue(t, m, "envoy_rls_limit_rate_per_second"); v != 1 {
		t.Errorf("2,592,000 a calendar month: %v per second, want 1 (a month of 30 days)", v)
	}
}

// gatherValue is the value of name's one series, a gauge or a counter.
func gatherValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			if c := f.GetMetric()[0].GetCounter(); c != nil {
				return c.GetValue()
			}
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s", name)
	return 0
}
