package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/refstats"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// configCounter counts config loads and refusals.
type configCounter interface{ ConfigReload(ok bool) }

// configCounters tells each of them.
type configCounters []configCounter

func (cs configCounters) ConfigReload(ok bool) {
	for _, c := range cs {
		c.ConfigReload(ok)
	}
}

// referenceStats are envoyproxy/ratelimit's stats, when asked for: sent to
// StatsD, served in the Prometheus format, or both.
type referenceStats struct {
	observer *refstats.Observer // nil: none asked for
	handler  http.Handler       // the Prometheus endpoint; nil: none
	statsd   *refstats.StatsD
}

// newReferenceStats makes the sinks the flags ask for.
func newReferenceStats(s *settings, log *slog.Logger) (*referenceStats, error) {
	var sinks sinks
	r := &referenceStats{}
	if s.statsd.addr != "" {
		sd, err := refstats.NewStatsD(s.statsd.addr, s.statsd.protocol.String(), log, s.statsd.options()...)
		if err != nil {
			return nil, err
		}
		r.statsd = sd
		sinks = append(sinks, sd)
	}
	if s.refMetrics.addr != "" {
		p, err := refstats.NewPrometheus(s.refMetrics.mapping, s.refMetrics.responseMillis, log)
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("GET "+s.refMetrics.path, p.Handler())
		r.handler = mux
		sinks = append(sinks, p)
	}
	if len(sinks) > 0 {
		r.observer = refstats.NewObserver(sinks, s.nearLimitRatio)
	}
	return r, nil
}

// observer is what the service tells: our metrics, and the reference's
// stats if asked for.
func (r *referenceStats) serviceObserver(m *metrics.Metrics) rls.Observer {
	if r.observer == nil {
		return m
	}
	return rls.Observers(m, r.observer)
}

// counters are what counts config loads.
func (r *referenceStats) counters(m *metrics.Metrics) configCounter {
	if r.observer == nil {
		return m
	}
	return configCounters{m, r.observer}
}

// run flushes StatsD every interval until ctx ends.
func (r *referenceStats) run(ctx context.Context, interval time.Duration) <-chan struct{} {
	done := make(chan struct{})
	if r.statsd == nil {
		close(done)
		return done
	}
	go func() { defer close(done); r.statsd.Run(ctx, interval) }()
	return done
}

// sinks sends to each of several sinks.
type sinks []refstats.Sink

func (ss sinks) Count(name string, n uint64) {
	for _, s := range ss {
		s.Count(name, n)
	}
}

func (ss sinks) Time(name string, d time.Duration) {
	for _, s := range ss {
		s.Time(name, d)
	}
}
