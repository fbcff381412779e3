package refstats

import (
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// defaultMapping names the stats as envoyproxy/ratelimit's Prometheus
// metrics are named when it is given no mapping.
//
//go:embed mapping.yaml
var defaultMapping string

// Prometheus serves the stats in the Prometheus format, each StatsD name
// turned into a metric name and labels by a statsd_exporter mapping (the
// library the reference uses): timings are histograms of milliseconds,
// times a mapping's scale. A name no mapping matches is served with its
// non-alphanumeric characters as '_', without labels, as statsd_exporter
// serves it.
type Prometheus struct {
	mapper *mapper.MetricMapper
	reg    *prometheus.Registry
	log    *slog.Logger

	mu       sync.Mutex
	resolved map[resolveKey]resolved         // by StatsD name and type
	vecs     map[string]prometheus.Collector // by metric name
	labels   map[string][]string             // each metric's label names
}

type resolveKey struct {
	name string
	typ  mapper.MetricType
}

// resolved is where a StatsD name's values go; nil vecs when dropped.
type resolved struct {
	counter *prometheus.CounterVec
	hist    *prometheus.HistogramVec
	values  []string // label values, in the vec's label order
	scale   float64
}

// NewPrometheus maps names by the YAML file mappingFile (statsd_exporter's
// format), or by the reference's default naming if it is "": there, the
// response time is in seconds, or in milliseconds with responseMillis
// (the reference's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, which drops
// its default mapping's scale; its name still says seconds, as there).
func NewPrometheus(mappingFile string, responseMillis bool, log *slog.Logger) (*Prometheus, error) {
	m := &mapper.MetricMapper{}
	var err error
	if mappingFile == "" {
		mapping := defaultMapping
		if responseMillis {
			mapping = strings.Replace(mapping, "    scale: 0.001\n", "", 1)
		}
		err = m.InitFromYAMLString(mapping)
	} else {
		err = m.InitFromFile(mappingFile)
	}
	if err != nil {
		return nil, fmt.Errorf("statsd mapping %s: %w", mappingFile, err)
	}
	return &Prometheus{mapper: m, reg: prometheus.NewRegistry(), log: log,
		resolved: map[resolveKey]resolved{}, vecs: map[string]prometheus.Collector{}, labels: map[string][]string{}}, nil
}

// Handler serves the metrics.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{})
}

// Count adds n to a counter.
func (p *Prometheus) Count(name string, n uint64) {
	if r := p.resolve(name, mapper.MetricTypeCounter); r.counter != nil {
		r.counter.WithLabelValues(r.values...).Add(float64(n))
	}
}

// Time records a timing, in milliseconds times the mapping's scale.
func (p *Prometheus) Time(name string, d time.Duration) {
	if r := p.resolve(name, mapper.MetricTypeObserver); r.hist != nil {
		r.hist.WithLabelValues(r.values...).Observe(float64(d) / float64(time.Millisecond) * r.scale)
	}
}

// resolve maps a StatsD name once, making its metric on first use.
func (p *Prometheus) resolve(name string, typ mapper.MetricType) resolved {
	k := resolveKey{name, typ}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.resolved[k]; ok {
		return r
	}
	r := p.make(name, typ)
	p.resolved[k] = r
	return r
}

func (p *Prometheus) make(name string, typ mapper.MetricType) resolved {
	metric, labels := escapeName(name), prometheus.Labels{}
	var buckets []float64
	r := resolved{scale: 1}
	if m, l, ok := p.mapper.GetMapping(name, typ); ok {
		if m.Action == mapper.ActionTypeDrop {
			return r
		}
		metric, labels = m.Name, l
		if m.Scale.Set {
			r.scale = m.Scale.Val
		}
		if m.HistogramOptions != nil {
			buckets = m.HistogramOptions.Buckets
		}
	}
	names := make([]string, 0, len(labels))
	for l := range labels {
		names = append(names, l)
	}
	slices.Sort(names)
	for _, l := range names {
		r.values = append(r.values, labels[l])
	}
	if prev, ok := p.labels[metric]; ok && !slices.Equal(prev, names) {
		p.log.Warn("statsd mapping: a metric with two sets of labels: the second is not served", "metric", metric, "labels", names, "first", prev)
		return resolved{}
	}
	vec, ok := p.vecs[metric]
	if !ok {
		if typ == mapper.MetricTypeCounter {
			vec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metric, Help: "envoyproxy/ratelimit's " + name}, names)
		} else {
			if buckets == nil {
				buckets = prometheus.DefBuckets
			}
			vec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metric, Help: "envoyproxy/ratelimit's " + name, Buckets: buckets}, names)
		}
		if err := p.reg.Register(vec); err != nil {
			p.log.Warn("statsd mapping: metric not served", "metric", metric, "err", err)
			return resolved{}
		}
		p.vecs[metric], p.labels[metric] = vec, names
	}
	switch v := vec.(type) {
	case *prometheus.CounterVec:
		if typ == mapper.MetricTypeCounter {
			r.counter = v
		}
	case *prometheus.HistogramVec:
		if typ == mapper.MetricTypeObserver {
			r.hist = v
		}
	}
	return r
}

// escapeName is statsd_exporter's name for an unmapped StatsD name: every
// character but ASCII letters, digits and '_' as '_', and a leading digit
// prefixed with '_'.
func escapeName(name string) string {
	var b strings.Builder
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c >= '0' && c <= '9' && i > 0:
			b.WriteRune(c)
		case c >= '0' && c <= '9':
			b.WriteString("_")
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
