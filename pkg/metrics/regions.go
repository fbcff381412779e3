package metrics

import (
	"time"

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

// WatchRegions exports, at each scrape, the seconds since this replica
// last exchanged with each region's store (-1 before the first).
func (m *Metrics) WatchRegions(regions []string, last func(region string) time.Time) {
	for _, name := range regions {
		m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "envoy_rls_region_last_exchange_seconds",
			Help: "Seconds since this replica last exchanged its report with the region's store (-1: never).", ConstLabels: prometheus.Labels{"region": name}},
			func() float64 {
				at := last(name)
				if at.IsZero() {
					return -1
				}
				return time.Since(at).Seconds()
			}))
	}
}
