package metrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// TestRegionSeries: each region's exchanges by result, and at each scrape
// what the exchange's statuses say: the last exchange's age, the state
// (one series a state, 1 for the one it is in), buckets and demand.
func TestRegionSeries(t *testing.T) {
	m := New(0)
	o := m.Regions([]string{"eu", "us"})
	o.Exchanged("eu", nil)
	o.Exchanged("us", nil)
	o.Exchanged("us", errors.New("timeout"))
	statuses := []region.Status{
		{Region: "eu", Own: true, State: "fresh", LastExchangeSeconds: 0.5, Replicas: 2, Buckets: 3, Demand: 12.5},
		{Region: "us", State: "late", LastExchangeSeconds: -1},
	}
	m.WatchRegions(func() []region.Status { return statuses })
	want := `
# HELP envoy_rls_region_exchanges_total Exchanges of this replica's reports with each region's store (this region's own included), by result (ok, failed).
# TYPE envoy_rls_region_exchanges_total counter
envoy_rls_region_exchanges_total{region="eu",result="failed"} 0
envoy_rls_region_exchanges_total{region="eu",result="ok"} 1
envoy_rls_region_exchanges_total{region="us",result="failed"} 1
envoy_rls_region_exchanges_total{region="us",result="ok"} 1
# HELP envoy_rls_region_last_exchange_seconds Seconds since this replica last exchanged its report with the region's store (-1: never).
# TYPE envoy_rls_region_last_exchange_seconds gauge
envoy_rls_region_last_exchange_seconds{region="eu"} 0.5
envoy_rls_region_last_exchange_seconds{region="us"} -1
# HELP envoy_rls_region_state The region's state at the last division, 1 for the state it is in: fresh (its reports arrived), late (they did not: it keeps its claims), gone (silent past -region-silence: its claims given back).
# TYPE envoy_rls_region_state gauge
envoy_rls_region_state{region="eu",state="fresh"} 1
envoy_rls_region_state{region="eu",state="gone"} 0
envoy_rls_region_state{region="eu",state="late"} 0
envoy_rls_region_state{region="us",state="fresh"} 0
envoy_rls_region_state{region="us",state="gone"} 0
envoy_rls_region_state{region="us",state="late"} 1
# HELP envoy_rls_region_buckets Buckets the region's replicas reported using in the last interval divided.
# TYPE envoy_rls_region_buckets gauge
envoy_rls_region_buckets{region="eu"} 3
envoy_rls_region_buckets{region="us"} 0
# HELP envoy_rls_region_demand_per_second Hits a second the region's replicas were asked of every bucket they reported, in the last interval divided.
# TYPE envoy_rls_region_demand_per_second gauge
envoy_rls_region_demand_per_second{region="eu"} 12.5
envoy_rls_region_demand_per_second{region="us"} 0
`
	names := []string{"envoy_rls_region_exchanges_total", "envoy_rls_region_last_exchange_seconds", "envoy_rls_region_state", "envoy_rls_region_buckets", "envoy_rls_region_demand_per_second"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	statuses[1].State = "gone"
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(strings.NewReplacer(
		`envoy_rls_region_state{region="us",state="gone"} 0`, `envoy_rls_region_state{region="us",state="gone"} 1`,
		`envoy_rls_region_state{region="us",state="late"} 1`, `envoy_rls_region_state{region="us",state="late"} 0`).Replace(want)), names...); err != nil {
		t.Errorf("us gone: %v", err)
	}
}
