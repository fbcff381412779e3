package main

import (
	"math"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// tracing maps the reference's tracing (OpenTelemetry over OTLP) to the
// -otlp-* flags. Off, the default, nothing is traced whatever the OTEL_*
// variables say, as there. The exporter's other settings (headers,
// certificates, timeout, compression) the SDK reads itself, as there.
func (r *envoyReader) tracing() {
	if !r.on("TRACING_ENABLED", false) {
		return
	}
	protocol := strings.ToLower(r.get("TRACING_EXPORTER_PROTOCOL", "http"))
	if protocol != "http" && protocol != "grpc" {
		r.fail("TRACING_EXPORTER_PROTOCOL", "%q: want http or grpc", protocol)
		return
	}
	r.set("otlp-protocol", protocol)
	r.otlpEndpoint(protocol)
	r.set("otlp-service-name", r.get("TRACING_SERVICE_NAME", "RateLimit"))
	r.copy("TRACING_SERVICE_NAMESPACE", "otlp-service-namespace")
	// Unset, the instance id is left to pkg/tracing, which makes a random
	// UUID as the reference does.
	r.copy("TRACING_SERVICE_INSTANCE_ID", "otlp-service-instance-id")
	rate := r.get("TRACING_SAMPLING_RATE", "1")
	f, err := strconv.ParseFloat(rate, 64)
	if err != nil || math.IsNaN(f) {
		r.fail("TRACING_SAMPLING_RATE", "%q: want a number", rate)
		return
	}
	// The reference samples every call from 1 up, none from 0 down.
	r.set("otlp-sampling-ratio", strconv.FormatFloat(min(max(f, 0), 1), 'g', -1, 64))
}

// otlpEndpoint sets -otlp-endpoint where the OpenTelemetry SDK would send
// spans: to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else to
// OTEL_EXPORTER_OTLP_ENDPOINT (over HTTP, a base URL under which
// /v1/traces is posted), else to the protocol's default.
func (r *envoyReader) otlpEndpoint(protocol string) {
	name := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	v := strings.TrimSpace(r.get(name, "")) // trimmed, as the SDK reads it
	if v == "" {
		name = "OTEL_EXPORTER_OTLP_ENDPOINT"
		v = strings.TrimSpace(r.get(name, ""))
	}
	switch {
	case v == "" && protocol == "grpc":
		r.set("otlp-endpoint", "localhost:4317")
		return
	case v == "":
		r.set("otlp-endpoint", "http://localhost:4318/v1/traces")
		return
	}
	u, err := url.Parse(v)
	isURL := err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
	switch {
	case protocol == "grpc" && isURL: // http:// without TLS, https:// with
		r.set("otlp-endpoint", v)
	case protocol == "grpc":
		// host:port: TLS, unless OTEL_EXPORTER_OTLP_INSECURE says not,
		// as OpenTelemetry reads an endpoint without a scheme.
		if _, _, err := net.SplitHostPort(v); err != nil {
			r.fail(name, "%q: want an http:// or https:// URL, or host:port", v)
		} else if r.otlpInsecure() {
			r.set("otlp-endpoint", v)
		} else {
			r.set("otlp-endpoint", "https://"+v)
		}
	case !isURL:
		r.fail(name, "%q: want an http:// or https:// URL", v)
	case name == "OTEL_EXPORTER_OTLP_ENDPOINT":
		u.Path = path.Join("/", u.Path, "v1/traces")
		r.set("otlp-endpoint", u.String())
	default:
		if u.Path == "" || u.Path == "/" {
			r.warn(name, "%q has no path: spans are posted to /v1/traces, where envoyproxy/ratelimit posts them to /", v)
		}
		r.set("otlp-endpoint", v)
	}
}

// otlpInsecure reads OTEL_EXPORTER_OTLP_TRACES_INSECURE, else
// OTEL_EXPORTER_OTLP_INSECURE, as the SDK does: true (any case) or not.
func (r *envoyReader) otlpInsecure() bool {
	v := r.get("OTEL_EXPORTER_OTLP_TRACES_INSECURE", r.get("OTEL_EXPORTER_OTLP_INSECURE", ""))
	return strings.EqualFold(strings.TrimSpace(v), "true")
}
