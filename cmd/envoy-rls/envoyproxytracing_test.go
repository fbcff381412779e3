package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

// otlpFlags returns the -otlp-* flags ref sets, sorted, as name=value.
func otlpFlags(ref *envoyproxyEnv) string {
	var got []string
	for _, k := range slices.Sorted(maps.Keys(ref.flags)) {
		if strings.HasPrefix(k, "otlp-") {
			got = append(got, k+"="+ref.flags[k])
		}
	}
	return strings.Join(got, " ")
}

func TestEnvoyproxyTracingEnv(t *testing.T) {
	const httpDefaults = "otlp-protocol=http otlp-sampling-ratio=1 otlp-service-name=RateLimit"
	const grpcDefaults = "otlp-protocol=grpc otlp-sampling-ratio=1 otlp-service-name=RateLimit"
	for _, c := range []struct {
		name    string
		env     []string // name, value, ...
		want    string   // the -otlp-* flags, sorted
		warning string   // the variable warned of, if any
	}{
		{"off: the OTEL_ variables are not read", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318", "TRACING_SERVICE_NAME", "rl"}, "", ""},
		{"off, said so", []string{"TRACING_ENABLED", "false", "TRACING_EXPORTER_PROTOCOL", "zipkin"}, "", ""},
		{"on: the defaults", []string{"TRACING_ENABLED", "true"},
			"otlp-endpoint=http://localhost:4318/v1/traces " + httpDefaults, ""},
		{"gRPC's default endpoint", []string{"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "grpc"},
			"otlp-endpoint=localhost:4317 " + grpcDefaults, ""},
		{"each variable", []string{"TRACING_ENABLED", "1", "TRACING_EXPORTER_PROTOCOL", "GRPC", "TRACING_SERVICE_NAME", "rate-limit",
			"TRACING_SERVICE_NAMESPACE", "envoy-gateway-system", "TRACING_SERVICE_INSTANCE_ID", "ratelimit-7d9f", "TRACING_SAMPLING_RATE", "0.25",
			"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"},
			"otlp-endpoint=http://collector:4317 otlp-protocol=grpc otlp-sampling-ratio=0.25 otlp-service-instance-id=ratelimit-7d9f " +
				"otlp-service-name=rate-limit otlp-service-namespace=envoy-gateway-system", ""},
		{"a sampling rate above 1 samples all", []string{"TRACING_ENABLED", "true", "TRACING_SAMPLING_RATE", "2"},
			"otlp-endpoint=http://localhost:4318/v1/traces " + httpDefaults, ""},
		{"a sampling rate below 0 samples none", []string{"TRACING_ENABLED", "true", "TRACING_SAMPLING_RATE", "-1"},
			"otlp-endpoint=http://localhost:4318/v1/traces otlp-protocol=http otlp-sampling-ratio=0 otlp-service-name=RateLimit", ""},
		{"HTTP: the base endpoint gets /v1/traces", []string{"TRACING_ENABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example.com:4318"},
			"otlp-endpoint=https://otel.example.com:4318/v1/traces " + httpDefaults, ""},
		{"HTTP: under its path", []string{"TRACING_ENABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", " http://collector:4318/otlp/ "},
			"otlp-endpoint=http://collector:4318/otlp/v1/traces " + httpDefaults, ""},
		{"HTTP: the traces endpoint as it is, first", []string{"TRACING_ENABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/custom/traces"},
			"otlp-endpoint=http://collector:4318/custom/traces " + httpDefaults, ""},
		{"HTTP: a traces endpoint without a path", []string{"TRACING_ENABLED", "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318"},
			"otlp-endpoint=http://collector:4318 " + httpDefaults, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"gRPC: https:// is TLS", []string{"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://otel.example.com:4317"},
			"otlp-endpoint=https://otel.example.com:4317 " + grpcDefaults, ""},
		{"gRPC: host:port is TLS by default", []string{"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"},
			"otlp-endpoint=https://collector:4317 " + grpcDefaults, ""},
		{"gRPC: host:port, insecure", []string{"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317", "OTEL_EXPORTER_OTLP_INSECURE", "TRUE"},
			"otlp-endpoint=collector:4317 " + grpcDefaults, ""},
		{"gRPC: the traces variable's insecure first", []string{"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317", "OTEL_EXPORTER_OTLP_INSECURE", "true", "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "false"},
			"otlp-endpoint=https://collector:4317 " + grpcDefaults, ""},
	} {
		env := map[string]string{}
		for i := 0; i+1 < len(c.env); i += 2 {
			env[c.env[i]] = c.env[i+1]
		}
		ref, err := readEnvoyproxyEnv(lookupIn(env))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var warned []string
		for _, w := range ref.warnings {
			name, _, _ := strings.Cut(w, ":")
			warned = append(warned, name)
		}
		if got := otlpFlags(ref); got != c.want || strings.Join(warned, " ") != c.warning {
			t.Errorf("%s:\n got %s\nwant %s\nwarnings %q, want %s", c.name, got, c.want, ref.warnings, c.warning)
		}
	}
}

func TestEnvoyproxyTracingEnvErrors(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"TRACING_EXPORTER_PROTOCOL", "zipkin"}, `TRACING_EXPORTER_PROTOCOL: "zipkin": want http or grpc`},
		{[]string{"TRACING_SAMPLING_RATE", "often"}, `TRACING_SAMPLING_RATE: "often": want a number`},
		{[]string{"TRACING_SAMPLING_RATE", "NaN"}, `TRACING_SAMPLING_RATE: "NaN": want a number`},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318": want an http:// or https:// URL`},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "unix:///otel.sock"}, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "unix:///otel.sock": want an http:// or https:// URL`},
		{[]string{"TRACING_EXPORTER_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "collector"},
			`OTEL_EXPORTER_OTLP_ENDPOINT: "collector": want an http:// or https:// URL, or host:port`},
		{[]string{"TRACING_ENABLED", "yes"}, `TRACING_ENABLED="yes": want true or false`},
	} {
		env := map[string]string{"TRACING_ENABLED": "true"}
		for i := 0; i+1 < len(c.env); i += 2 {
			env[c.env[i]] = c.env[i+1]
		}
		_, err := readEnvoyproxyEnv(lookupIn(env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.env, err, c.want)
		}
	}
}

// TestTracingOptions: what the flags, and the reference's variables
// through them, give the tracing package.
func TestTracingOptions(t *testing.T) {
	describe := func(o tracing.Options) string {
		ratio := "nil"
		if o.SamplingRatio != nil {
			ratio = fmt.Sprint(*o.SamplingRatio)
		}
		return fmt.Sprintf("%s %q %q/%q %q %q ratio %s", o.Endpoint, o.Protocol, o.ServiceName, o.DefaultServiceName,
			o.ServiceNamespace, o.ServiceInstanceID, ratio)
	}
	for _, c := range []struct {
		args      []string
		env       map[string]string
		reference bool
		want      string
	}{
		{[]string{"-otlp-endpoint", "collector:4317"}, nil, false,
			`collector:4317 "" ""/"envoy-rls" "" "" ratio nil`},
		{[]string{"-otlp-endpoint", "https://otel:4317", "-otlp-protocol", "grpc", "-otlp-service-name", "rls", "-otlp-sampling-ratio", "0.1"}, nil, false,
			`https://otel:4317 "grpc" "rls"/"" "" "" ratio 0.1`},
		{nil, map[string]string{"RLS_OTLP_ENDPOINT": "http://c:4318", "RLS_OTLP_SERVICE_NAMESPACE": "ns", "RLS_OTLP_SERVICE_INSTANCE_ID": "pod-1"}, false,
			`http://c:4318 "" ""/"envoy-rls" "ns" "pod-1" ratio nil`},
		{nil, map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
			"TRACING_SERVICE_NAMESPACE": "ns", "TRACING_SAMPLING_RATE": "0.5"}, true,
			`http://c:4317 "grpc" "RateLimit"/"" "ns" "" ratio 0.5`},
		// An RLS_ variable beats the reference's.
		{nil, map[string]string{"TRACING_ENABLED": "true", "RLS_OTLP_SAMPLING_RATIO": "0", "RLS_OTLP_SERVICE_NAME": "mine"}, true,
			`http://localhost:4318/v1/traces "http" "mine"/"" "" "" ratio 0`},
		// Started as ratelimit without TRACING_ENABLED, an -otlp-endpoint
		// still traces, as envoy-rls.
		{[]string{"-otlp-endpoint", "c:4317"}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"}, true,
			`c:4317 "" ""/"envoy-rls" "" "" ratio nil`},
	} {
		env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false"}
		maps.Copy(env, c.env)
		s, err := parseFlags(c.args, lookupIn(env), io.Discard, c.reference)
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.env, err)
			continue
		}
		o := s.tracing.options()
		if got := describe(o); got != c.want {
			t.Errorf("%v %v:\n got %s\nwant %s", c.args, c.env, got, c.want)
		}
		if o.ServiceVersion == "" {
			t.Errorf("%v: no service version", c.args)
		}
	}
}

func TestTracingFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-otlp-endpoint", "c:4317", "-otlp-sampling-ratio", "1.5"}, `"1.5": want a number from 0 to 1`},
		{[]string{"-otlp-endpoint", "c:4317", "-otlp-sampling-ratio", "NaN"}, `"NaN": want a number from 0 to 1`},
		{[]string{"-otlp-endpoint", "c:4317", "-otlp-protocol", "zipkin"}, "want auto, grpc or http"},
		{[]string{"-otlp-protocol", "grpc"}, "-otlp-protocol sets how traces are sent: it needs -otlp-endpoint"},
		{[]string{"-otlp-service-name", "rls"}, "-otlp-service-name sets how traces are sent: it needs -otlp-endpoint"},
		{[]string{"-otlp-sampling-ratio", "0.5"}, "-otlp-sampling-ratio sets how traces are sent: it needs -otlp-endpoint"},
	} {
		_, err := parseFlags(c.args, lookupIn(nil), io.Discard, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
