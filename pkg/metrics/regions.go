package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// regionMetrics count the exchanges with each region's store. It
// implements region.Observer.
type regionMetrics struct {
	exchanges *prometheus.CounterVec
	// ok and failed are each region's counters, looked up once.
	ok, failed map[string]prometheus.Counter
}

// Regions returns the regions' metrics, registered with the others: the
// exchanges with each region's store (this region's own included), by
// result. WatchRegions adds the age of the last.
func (m *Metrics) Regions(regions []string) region.Observer {
	r := &regionMetrics{
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_rls_region_exchanges_total",
			Help: "Exchanges of this replica's reports with each region's store (this region's own included), by result (ok, failed)."},
			[]string{"region", "result"}),
		ok: map[string]prometheus.Counter{}, failed: map[string]prometheus.Counter{},
	}
	m.registry.MustRegister(r.exchanges)
	for _, name := range regions {
		r.ok[name] = r.exchanges.WithLabelValues(name, "ok")
		r.failed[name] = r.exchanges.WithLabelValues(name, "failed")
	}
	return r
}

func (r *regionMetrics) Exchanged(region string, err error) {
	c := r.ok[region]
	if err != nil {
		c = r.failed[region]
	}
	if c != nil {
		c.Inc()
	}
}

// WatchRegions exports, at each scrape, each region as statuses gives
// it (region.Exchange.Statuses): the seconds since this replica last
// exchanged with its store (-1 before the first), its state at the last
// division, and the buckets and demand its replicas last reported.
func (m *Metrics) WatchRegions(statuses func() []region.Status) {
	m.registry.MustRegister(&regionCollector{statuses: statuses})
}

var (
	regionLastExchange = prometheus.NewDesc("envoy_rls_region_last_exchange_seconds",
		"Seconds since this replica last exchanged its report with the region's store (-1: never).", []string{"region"}, nil)
	regionState = prometheus.NewDesc("envoy_rls_region_state",
		"The region's state at the last division, 1 for the state it is in: fresh (its reports arrived), late (they did not: it keeps its claims), gone (silent past -region-silence: its claims given back).",
		[]string{"region", "state"}, nil)
	regionBuckets = prometheus.NewDesc("envoy_rls_region_buckets",
		"Buckets the region's replicas reported using in the last interval divided.", []string{"region"}, nil)
	regionDemand = prometheus.NewDesc("envoy_rls_region_demand_per_second",
		"Hits a second the region's replicas were asked of every bucket they reported, in the last interval divided.", []string{"region"}, nil)
)

// regionCollector reads the regions' statuses once a scrape.
type regionCollector struct {
	statuses func() []region.Status
}

func (c *regionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- regionLastExchange
	ch <- regionState
	ch <- regionBuckets
	ch <- regionDemand
}

func (c *regionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.statuses() {
		ch <- prometheus.MustNewConstMetric(regionLastExchange, prometheus.GaugeValue, s.LastExchangeSeconds, s.Region)
		for _, st := range []string{"fresh", "late", "gone"} {
			v := 0.0
			if s.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(regionState, prometheus.GaugeValue, v, s.Region, st)
		}
		ch <- prometheus.MustNewConstMetric(regionBuckets, prometheus.GaugeValue, float64(s.Buckets), s.Region)
		ch <- prometheus.MustNewConstMetric(regionDemand, prometheus.GaugeValue, s.Demand, s.Region)
	}
}
