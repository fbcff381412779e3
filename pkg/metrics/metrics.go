// Package metrics exports the service's Prometheus metrics: calls and
// their latency, decisions per limit, each configured limit's value, the
// store's latency and errors, the local caches, config reloads, the memory
// store's size and the build.
//
// Limits are labelled by their name or their path in the config, never by
// the values of a request (unless the config asks for them with
// detailed_metric or value_to_metric), so the number of series stays
// bounded by the config.
package metrics

import (
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// DefaultNearLimitRatio is the share of a bucket past which an admitted
// request counts as near the limit, as in envoyproxy/ratelimit.
const DefaultNearLimitRatio = 0.8

// unknownDomain labels calls for domains the config does not have: the
// request's own domain would let clients create series at will.
const unknownDomain = "(unknown)"

// Metrics holds the collectors. It implements rls.Observer.
type Metrics struct {
	registry  *prometheus.Registry
	nearRatio float64

	calls          seriesCache[callKey, prometheus.Counter]
	callDuration   *latencyVec[string]
	decisions      seriesCache[decisionKey, prometheus.Counter]
	pastLimit      seriesCache[limitKey, prometheus.Counter]
	storeDuration  *latencyVec[storeKey]
	storeErrors    prometheus.Counter
	cacheHits      prometheus.Counter
	failureAnswers *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	lastReload     prometheus.Gauge
	fallback       prometheus.Gauge
	switches       *prometheus.CounterVec
	xdsUnknown     *prometheus.CounterVec
}

// New returns the metrics, registered in a registry of their own with the
// Go runtime and process collectors. nearLimitRatio in (0, 1], or 0 for
// DefaultNearLimitRatio.
func New(nearLimitRatio float64) *Metrics {
	if nearLimitRatio <= 0 || nearLimitRatio > 1 {
		nearLimitRatio = DefaultNearLimitRatio
	}
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_calls_total",
		Help: "ShouldRateLimit calls, by domain (\"(unknown)\" for domains not in the config) and outcome: OK, OVER_LIMIT or a gRPC error code.",
	}, []string{"domain", "code"})
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_limit_decisions_total",
		Help: "Decisions per limit (its name, or path in the config): admitted, over_limit, shadow_would_block (a shadow limit that had no room), near_limit (admitted past the near-limit ratio; also counted as admitted).",
	}, []string{"domain", "limit", "decision"})
	pastLimit := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_charged_past_limit_hits_total",
		Help: "Hits of charges that did not fit a limit that charges always (charge: always), recorded all the same, per limit: usage already spent, which the limit reports as a debt until it has leaked, slid or reset away.",
	}, []string{"domain", "limit"})
	m := &Metrics{
		registry:  prometheus.NewRegistry(),
		nearRatio: nearLimitRatio,
		calls:     seriesCache[callKey, prometheus.Counter]{with: calls.WithLabelValues},
		callDuration: newLatencyVec[string]("envoy_rls_call_duration_seconds",
			"Time to answer a ShouldRateLimit call (gRPC or POST /json), by outcome: OK, OVER_LIMIT or a gRPC error code.", "code"),
		decisions: seriesCache[decisionKey, prometheus.Counter]{with: decisions.WithLabelValues},
		pastLimit: seriesCache[limitKey, prometheus.Counter]{with: pastLimit.WithLabelValues},
		storeDuration: newLatencyVec[storeKey]("envoy_rls_store_duration_seconds",
			"Time a bucket store call took, by store (memory, redis, fallback) and operation (apply: decide a request; peek: read the figures of a rejected request's other descriptors).",
			"store", "operation"),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_store_errors_total",
			Help: "Requests the bucket store failed to decide (Redis down, a timeout).",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_local_cache_hits_total",
			Help: "Calls rejected from the local over-limit cache, without asking the store.",
		}),
		failureAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_failure_mode_answers_total",
			Help: "Calls answered by the failure mode (allow or deny) because the store failed.",
		}, []string{"mode"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_config_reloads_total",
			Help: "Config reloads, by result: success, or failure (the previous config stays in force).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_config_last_success_timestamp_seconds",
			Help: "When the config in force was loaded, in Unix seconds.",
		}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_store_fallback",
			Help: "1 while requests are decided on the local memory store because Redis fails (failure mode local), else 0.",
		}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_store_switches_total",
			Help: "Switches between Redis and the local memory store (failure mode local), by the store switched to.",
		}, []string{"to"}),
		xdsUnknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_xds_unknown_fields_total",
			Help: "Fields of xDS RateLimitConfig resources that this service does not know and ignores, counted once per resource, message and field number: a newer API than the service reads.",
		}, []string{"message", "field"}),
	}
	m.registry.MustRegister(calls, m.callDuration, decisions, pastLimit, m.storeDuration, m.storeErrors, m.cacheHits, m.failureAnswers,
		m.reloads, m.lastReload, m.fallback, m.switches, m.xdsUnknown,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Exported at 0 before the first event, so that dashboards and alerts
	// see 0 rather than no data.
	for _, result := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(result)
	}
	for _, mode := range []rls.FailureMode{rls.FailAllow, rls.FailDeny} {
		m.failureAnswers.WithLabelValues(mode.String())
	}
	for _, to := range []string{"local", "redis"} {
		m.switches.WithLabelValues(to)
	}
	return m
}

// BuildInfo exports envoy_rls_build_info{version, goversion} = 1: the
// version of the binary and of the Go it was built with.
func (m *Metrics) BuildInfo(version string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "envoy_rls_build_info",
		Help:        "Always 1; its labels are the version of envoy-rls and of Go that built it.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	m.registry.Register(g) // a second call with the same version has nothing to add
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// Registry returns the registry, to add collectors to.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// WatchBuckets exports the number of buckets of the memory store and the
// bytes they count against -memory-max-bytes, read at each scrape, and if
// evictions is not nil, how many live buckets it dropped to make room (a
// sign that -memory-max-buckets or -memory-max-bytes is too small).
func (m *Metrics) WatchBuckets(count func() int, bytes func() int64, evictions func() uint64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "envoy_rls_memory_buckets",
		Help: "Buckets held by the in-memory store (expired ones not yet swept included).",
	}, func() float64 { return float64(count()) }))
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "envoy_rls_memory_bytes",
		Help: "Bytes the in-memory store's buckets count against -memory-max-bytes: keys plus a fixed overhead each.",
	}, func() float64 { return float64(bytes()) }))
	if evictions != nil {
		m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "envoy_rls_memory_evictions_total",
			Help: "Live buckets the in-memory store dropped to stay within -memory-max-buckets and -memory-max-bytes.",
		}, func() float64 { return float64(evictions()) }))
	}
}

// WatchBreakers reports, from open, how many Redis nodes' breakers are
// open: nodes whose calls are answered by the failure mode at once.
func (m *Metrics) WatchBreakers(open func() int) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "envoy_rls_redis_breakers_open",
		Help: "Redis nodes whose calls are answered by the failure mode without being sent: they timed out on -redis-breaker-timeouts calls in a row.",
	}, func() float64 { return float64(open()) }))
}

// Call implements rls.Observer.
func (m *Metrics) Call(domain, outcome string, took time.Duration) {
	if domain == "" {
		domain = unknownDomain
	}
	m.calls.get(callKey{domain, outcome}, func() []string { return []string{domain, outcome} }).Inc()
	m.callDuration.observe(outcome, func() []string { return []string{outcome} }, took)
}

// Limit implements rls.Observer.
func (m *Metrics) Limit(domain string, rule *descriptors.Rule, key string, hits int64, r *limit.Result, shadow bool) {
	label := rule.MetricLabel(key)
	if rule.Always && !r.Admitted && hits > 0 {
		m.pastLimit.get(limitKey{domain, label}, func() []string { return []string{domain, label} }).Add(float64(hits))
	}
	switch {
	case r.Admitted:
		m.decision(domain, label, "admitted")
		if size := rule.Limit.Size; size > 0 && float64(size-r.Remaining) > m.nearRatio*float64(size) {
			m.decision(domain, label, "near_limit")
		}
	case shadow:
		m.decision(domain, label, "shadow_would_block")
	default:
		m.decision(domain, label, "over_limit")
	}
}

func (m *Metrics) decision(domain, limit, decision string) {
	m.decisions.get(decisionKey{domain, limit, decision}, func() []string { return []string{domain, limit, decision} }).Inc()
}

// Store implements rls.Observer.
func (m *Metrics) Store(store, op string, took time.Duration, err error) {
	m.storeDuration.observe(storeKey{store, op}, func() []string { return []string{store, op} }, took)
	if err != nil {
		m.storeErrors.Inc()
	}
}

// CacheHit implements rls.Observer.
func (m *Metrics) CacheHit() { m.cacheHits.Inc() }

// FailureAnswer implements rls.Observer.
func (m *Metrics) FailureAnswer(mode rls.FailureMode) {
	m.failureAnswers.WithLabelValues(mode.String()).Inc()
}

// XDSUnknownField counts a field of an xDS resource that the service does
// not know.
func (m *Metrics) XDSUnknownField(message string, number int32) {
	m.xdsUnknown.WithLabelValues(message, strconv.Itoa(int(number))).Inc()
}

// ConfigReload counts a reload, and the time of a successful one.
func (m *Metrics) ConfigReload(ok bool) {
	if !ok {
		m.reloads.WithLabelValues("failure").Inc()
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.lastReload.SetToCurrentTime()
}

// ConfigLoaded records the time of the config loaded at start.
func (m *Metrics) ConfigLoaded() { m.lastReload.SetToCurrentTime() }

// StoreSwitch records a switch between Redis and the local fallback store.
func (m *Metrics) StoreSwitch(toFallback bool) {
	if toFallback {
		m.fallback.Set(1)
		m.switches.WithLabelValues("local").Inc()
		return
	}
	m.fallback.Set(0)
	m.switches.WithLabelValues("redis").Inc()
}

var _ rls.Observer = (*Metrics)(nil)
