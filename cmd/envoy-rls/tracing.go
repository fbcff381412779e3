package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

// tracingFlushTimeout bounds the time spent sending the last spans on
// shutdown, when the collector is slow or gone.
const tracingFlushTimeout = 5 * time.Second

// tracingFlags are the -otlp-* flags: traces sent to an OpenTelemetry
// collector.
type tracingFlags struct {
	endpoint    string
	protocol    choice[tracing.Protocol]
	serviceName trackedString
	namespace   string
	instanceID  string
	ratio       ratioFlag
}

func newTracingFlags(fs *flag.FlagSet) *tracingFlags {
	t := &tracingFlags{
		protocol:    choice[tracing.Protocol]{"", []option[tracing.Protocol]{{"auto", ""}, {"grpc", tracing.GRPC}, {"http", tracing.HTTP}}},
		serviceName: trackedString{value: "envoy-rls"},
		ratio:       ratioFlag{value: 1},
	}
	fs.StringVar(&t.endpoint, "otlp-endpoint", "", "send traces to this OpenTelemetry collector: `host:port` for OTLP over gRPC, or an http:// or https:// URL for OTLP over HTTP (or gRPC, with -otlp-protocol grpc); empty: no tracing")
	fs.Var(&t.protocol, "otlp-protocol", "how traces go to -otlp-endpoint: grpc (an http:// URL without TLS, https:// with it, host:port without), http, or auto (as the endpoint's form says)")
	fs.Var(&t.serviceName, "otlp-service-name", "the traces' service.name (OTEL_SERVICE_NAME, if set, beats the default, not the flag)")
	fs.StringVar(&t.namespace, "otlp-service-namespace", "", "the traces' service.namespace; empty: none, or OTEL_RESOURCE_ATTRIBUTES's")
	fs.StringVar(&t.instanceID, "otlp-service-instance-id", "", "the traces' service.instance.id, such as the pod's name; empty: a random UUID, or OTEL_RESOURCE_ATTRIBUTES's")
	fs.Var(&t.ratio, "otlp-sampling-ratio", "share of the calls without a trace context that are traced, from 0 to 1; calls with one follow their caller's decision (unset: OTEL_TRACES_SAMPLER if set)")
	return t
}

// check refuses settings that would have no effect.
func (t *tracingFlags) check() error {
	if t.endpoint != "" {
		return nil
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"-otlp-protocol", t.protocol.value != ""}, {"-otlp-service-name", t.serviceName.set}, {"-otlp-service-namespace", t.namespace != ""},
		{"-otlp-service-instance-id", t.instanceID != ""}, {"-otlp-sampling-ratio", t.ratio.set}} {
		if f.set {
			return fmt.Errorf("%s sets how traces are sent: it needs -otlp-endpoint", f.name)
		}
	}
	return nil
}

// options are the tracing package's options.
func (t *tracingFlags) options() tracing.Options {
	o := tracing.Options{Endpoint: t.endpoint, Protocol: t.protocol.value, ServiceNamespace: t.namespace,
		ServiceInstanceID: t.instanceID, ServiceVersion: version()}
	// The name given wins over OTEL_SERVICE_NAME; the default yields to it,
	// as it did before the flag.
	if t.serviceName.set {
		o.ServiceName = t.serviceName.value
	} else {
		o.DefaultServiceName = t.serviceName.value
	}
	if t.ratio.set {
		o.SamplingRatio = &t.ratio.value
	}
	return o
}

// sampling describes the sampling of calls without a trace context, for
// the log. Unset, the SDK reads OTEL_TRACES_SAMPLER from the process's
// environment, so that is where this looks.
func (t *tracingFlags) sampling() string {
	if t.ratio.set {
		return t.ratio.String()
	}
	if s := os.Getenv("OTEL_TRACES_SAMPLER"); s != "" {
		return "OTEL_TRACES_SAMPLER=" + s
	}
	return t.ratio.String()
}

// startTracing starts sending traces to -otlp-endpoint, and returns the
// service's tracing and the function that sends the last spans on
// shutdown. With no endpoint, the tracing is nil: the service traces
// nothing.
func startTracing(ctx context.Context, s *settings, log *slog.Logger) (*rls.Tracing, func(), error) {
	if s.tracing.endpoint == "" {
		return nil, func() {}, nil
	}
	tr, err := tracing.Start(ctx, s.tracing.options())
	if err != nil {
		return nil, nil, fmt.Errorf("-otlp-endpoint: %w", err)
	}
	// The exporter reports here a collector it cannot reach, once per
	// batch of spans; calls never wait for it.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	ep := tr.Endpoint()
	log.Info("tracing: spans go to an OpenTelemetry collector", "protocol", "OTLP/"+string(ep.Protocol), "endpoint", ep.Address,
		"service", tr.ServiceName(), "sampling_ratio", s.tracing.sampling())
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			log.Warn("tracing: the last spans were not all sent", "err", err)
		}
	}
	return &rls.Tracing{Provider: tr.Provider(), Propagator: tracing.Propagator()}, stop, nil
}

// trackedString is a string flag that knows whether it was set (given,
// or by a variable), for a default that other settings may replace.
type trackedString struct {
	value string
	set   bool
}

func (f *trackedString) Set(s string) error { f.value, f.set = s, true; return nil }

func (f *trackedString) String() string {
	if f == nil {
		return ""
	}
	return f.value
}

// ratioFlag is a share from 0 to 1 that knows whether it was set.
type ratioFlag struct {
	value float64
	set   bool
}

func (f *ratioFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return fmt.Errorf("%q: want a number from 0 to 1", s)
	}
	f.value, f.set = v, true
	return nil
}

func (f *ratioFlag) String() string {
	if f == nil {
		return "0"
	}
	return strconv.FormatFloat(f.value, 'g', -1, 64)
}
