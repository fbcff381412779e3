package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// quotaMetrics count the Rate Limit Quota Service's streams, reports and
// assignments. It implements rlqs.Observer.
type quotaMetrics struct {
	reports     prometheus.Counter
	reported    prometheus.Counter
	assignments *prometheus.CounterVec
	// assigned are assignments' counters by kind and changed, looked up
	// once: an answer counts one per bucket.
	assigned map[string][2]prometheus.Counter
	abandons prometheus.Counter
	failures prometheus.Counter
	static   prometheus.Counter
	stalled  prometheus.Counter
}

// RLQS returns the Rate Limit Quota Service's metrics, registered with the
// others: reports, assignments sent by kind (and whether a share moved),
// abandons and failures. WatchRLQS adds the streams and buckets open.
func (m *Metrics) RLQS() rlqs.Observer {
	q := &quotaMetrics{
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_rlqs_reports_total",
			Help: "RLQS usage reports received."}),
		reported: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_rlqs_reported_buckets_total",
			Help: "Buckets in the RLQS usage reports received."}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_rls_rlqs_assignments_total",
			Help: "RLQS assignments sent, by kind (token_bucket, allow_all, deny_all) and whether the bucket's assignment changed (a share that moved, or a first one): an unchanged one renews its TTL only."},
			[]string{"kind", "changed"}),
		abandons: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_rlqs_abandons_total",
			Help: "RLQS buckets abandoned: no Envoy reported a request of them for -rlqs-abandon-after."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_rlqs_failures_total",
			Help: "RLQS reports the store or the registry could not serve, answered by the failure mode."}),
		static: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_rlqs_fail_static_total",
			Help: "RLQS reports the store or the registry could not serve, answered from the last division known (-rlqs-fail-static)."}),
		stalled: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_rlqs_stalled_streams_total",
			Help: "RLQS streams ended because their client did not read an answer for the stream's assignment TTL."}),
	}
	m.registry.MustRegister(q.reports, q.reported, q.assignments, q.abandons, q.failures, q.static, q.stalled)
	q.assigned = map[string][2]prometheus.Counter{}
	for _, kind := range []string{"token_bucket", "allow_all", "deny_all"} {
		q.assigned[kind] = [2]prometheus.Counter{q.assignments.WithLabelValues(kind, "false"), q.assignments.WithLabelValues(kind, "true")}
	}
	return q
}

func (q *quotaMetrics) Report(buckets int) {
	q.reports.Inc()
	q.reported.Add(float64(buckets))
}

func (q *quotaMetrics) Assigned(kind string, changed bool) {
	if kind == "abandon" {
		q.abandons.Inc()
		return
	}
	c, ok := q.assigned[kind]
	if !ok {
		q.assignments.WithLabelValues(kind, strconv.FormatBool(changed)).Inc()
		return
	}
	i := 0
	if changed {
		i = 1
	}
	c[i].Inc()
}

func (q *quotaMetrics) Failed() { q.failures.Inc() }

func (q *quotaMetrics) FailStatic() { q.static.Inc() }

func (q *quotaMetrics) Stalled() { q.stalled.Inc() }

// WatchRLQS exports the service's own counts, read at each scrape: the
// streams open and the buckets they report.
func (m *Metrics) WatchRLQS(streams, buckets func() int) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "envoy_rls_rlqs_streams",
		Help: "RLQS streams open: one per Envoy (per rate_limit_quota filter) on this replica."},
		func() float64 { return float64(streams()) }))
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "envoy_rls_rlqs_buckets",
		Help: "RLQS buckets the open streams report (each stream's buckets counted once per stream)."},
		func() float64 { return float64(buckets()) }))
}
