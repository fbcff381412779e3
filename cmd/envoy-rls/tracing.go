package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

// tracingFlushTimeout bounds the time spent sending the last spans on
// shutdown, when the collector is slow or gone.
const tracingFlushTimeout = 5 * time.Second

// startTracing starts sending traces to -otlp-endpoint, and returns the
// service's tracing and the function that sends the last spans on
// shutdown. With no endpoint, the tracing is nil: the service traces
// nothing.
func startTracing(ctx context.Context, s *settings, log *slog.Logger) (*rls.Tracing, func(), error) {
	if s.otlpEndpoint == "" {
		return nil, func() {}, nil
	}
	tr, err := tracing.Start(ctx, tracing.Options{Endpoint: s.otlpEndpoint, ServiceName: "envoy-rls", ServiceVersion: version()})
	if err != nil {
		return nil, nil, fmt.Errorf("-otlp-endpoint: %w", err)
	}
	// The exporter reports here a collector it cannot reach, once per
	// batch of spans; calls never wait for it.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	ep := tr.Endpoint()
	log.Info("tracing: spans go to an OpenTelemetry collector", "protocol", "OTLP/"+string(ep.Protocol), "endpoint", ep.Address)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			log.Warn("tracing: the last spans were not all sent", "err", err)
		}
	}
	return &rls.Tracing{Provider: tr.Provider(), Propagator: tracing.Propagator()}, stop, nil
}
