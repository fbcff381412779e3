// Package refstats counts what envoyproxy/ratelimit counts, under its
// names, for the dashboards, alerts and tests written for it (Envoy
// Gateway's among them): per limit
// ratelimit.service.rate_limit.<domain>.<key>.total_hits, over_limit,
// near_limit, within_limit and shadow_mode; per call
// ratelimit_server.ShouldRateLimit.total_requests and response_time; the
// store's errors and the config's loads. They go to StatsD (NewStatsD:
// plain, or DogStatsD with tags and mogrifiers), or are served in the
// Prometheus format named through a statsd_exporter mapping
// (NewPrometheus), as the reference does.
package refstats

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Sink receives the stats: counters and timings, by their StatsD names.
type Sink interface {
	Count(name string, n uint64)
	Time(name string, d time.Duration)
}

// Observer is an rls.Observer that counts into a sink.
type Observer struct {
	sink      Sink
	nearRatio float64
}

var _ rls.Observer = (*Observer)(nil)

// NewObserver counts into sink; a limit is near once more than nearRatio
// of it is used.
func NewObserver(sink Sink, nearRatio float64) *Observer {
	return &Observer{sink: sink, nearRatio: nearRatio}
}

// The names of the call's stats, as the reference's gRPC server reports
// them.
const (
	totalRequests = "ratelimit_server.ShouldRateLimit.total_requests"
	responseTime  = "ratelimit_server.ShouldRateLimit.response_time"
	storeError    = "ratelimit.service.call.should_rate_limit.redis_error"
	configLoaded  = "ratelimit.service.config_load_success"
	configFailed  = "ratelimit.service.config_load_error"
)

// Call counts a call and its time.
func (o *Observer) Call(_, _ string, took time.Duration) {
	o.sink.Count(totalRequests, 1)
	o.sink.Time(responseTime, took)
}

// Limit counts one limit's decision: its hits, and whether they were over
// the limit, near it or within it, and over it in shadow mode.
func (o *Observer) Limit(domain string, rule *descriptors.Rule, key string, hits int64, r *limit.Result, shadow bool) {
	if hits <= 0 {
		return // a check, or hits given back: the reference counts neither
	}
	n := uint64(hits)
	prefix := "ratelimit.service.rate_limit." + descriptors.StatName(domain) + "." + rule.StatKey(key) + "."
	o.sink.Count(prefix+"total_hits", n)
	switch {
	case !r.Admitted:
		o.sink.Count(prefix+"over_limit", n)
		if shadow {
			o.sink.Count(prefix+"shadow_mode", n)
		}
	default:
		o.sink.Count(prefix+"within_limit", n)
		if size := rule.Limit.Size; size > 0 && float64(size-r.Remaining) > o.nearRatio*float64(size) {
			o.sink.Count(prefix+"near_limit", n)
		}
	}
}

// Store counts a store call that failed.
func (o *Observer) Store(_, _ string, _ time.Duration, err error) {
	if err != nil {
		o.sink.Count(storeError, 1)
	}
}

// CacheHit is not counted: the reference counts its cache's rejections
// per key, which the over-limit counts include here.
func (o *Observer) CacheHit() {}

// FailureAnswer is not counted: the reference has no failure modes.
func (o *Observer) FailureAnswer(rls.FailureMode) {}

// ConfigReload counts a config loaded, or refused.
func (o *Observer) ConfigReload(ok bool) {
	if ok {
		o.sink.Count(configLoaded, 1)
	} else {
		o.sink.Count(configFailed, 1)
	}
}
