package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

var (
	limitDesc = prometheus.NewDesc("envoy_rls_limit",
		"Each limit of the config in force, in requests: a leaky bucket's size, a window's limit; by domain, limit (its name, or path in the config) and algorithm. Where several limits of a domain share a name and an algorithm, the smallest.",
		[]string{"domain", "limit", "algorithm"}, nil)
	limitRateDesc = prometheus.NewDesc("envoy_rls_limit_rate_per_second",
		"Each limit of the config in force as the requests per second it sustains: a leaky bucket's drip, a window's limit over its length (a calendar window's over its nominal period: a month is 30 days); labelled as envoy_rls_limit.",
		[]string{"domain", "limit", "algorithm"}, nil)
)

// WatchLimits exports each limit of the config in force, which config
// returns (nil: none yet), at each scrape: envoy_rls_limit and
// envoy_rls_limit_rate_per_second. Read from the config in force, they
// follow every reload, from files or an xDS server, and the series of a
// limit that left the config go with it.
func (m *Metrics) WatchLimits(config func() *descriptors.Config) {
	m.registry.MustRegister(&limitsCollector{config: config})
}

type limitsCollector struct {
	config func() *descriptors.Config

	mu     sync.Mutex
	last   *descriptors.Config // the config series were made of
	series []limitSeries
}

type limitSeries struct {
	domain, label, algorithm string
	size, perSecond          float64
}

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- limitDesc
	ch <- limitRateDesc
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.seriesOf(c.config()) {
		for _, g := range []struct {
			desc  *prometheus.Desc
			value float64
		}{{limitDesc, s.size}, {limitRateDesc, s.perSecond}} {
			if metric, err := prometheus.NewConstMetric(g.desc, prometheus.GaugeValue, g.value, s.domain, s.label, s.algorithm); err == nil {
				ch <- metric
			}
		}
	}
}

// seriesOf returns the series of cfg's limits, made once per config.
func (c *limitsCollector) seriesOf(cfg *descriptors.Config) []limitSeries {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case cfg == nil:
		return nil
	case cfg == c.last:
		return c.series
	}
	type key struct{ domain, label, algorithm string }
	index := map[key]int{}
	var series []limitSeries
	for _, d := range cfg.Domains() {
		for _, r := range d.Rules() {
			k := key{d.Name, r.Label(), r.Limit.Algorithm.String()}
			s := limitSeries{domain: k.domain, label: k.label, algorithm: k.algorithm, size: float64(r.Limit.Size), perSecond: r.Limit.PerSecond()}
			i, seen := index[k]
			if !seen {
				index[k] = len(series)
				series = append(series, s)
				continue
			}
			// A label must name one series: the tightest limit stands for all.
			series[i].size = min(series[i].size, s.size)
			series[i].perSecond = min(series[i].perSecond, s.perSecond)
		}
	}
	c.last, c.series = cfg, series
	return series
}
