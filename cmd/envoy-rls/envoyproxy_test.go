package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// istioEnv is the environment of Istio's rate-limit sample.
var istioEnv = map[string]string{
	"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false",
	"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
	"HOST": "::", "GRPC_HOST": "::",
}

func TestEnvoyproxyEnv(t *testing.T) {
	with := func(base map[string]string, kv ...string) map[string]string {
		env := maps.Clone(base)
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, c := range []struct {
		name     string
		env      map[string]string
		want     string // flags set, sorted, as name=value
		warnings string // each warning's variable
	}{
		{"Istio's sample", istioEnv,
			"config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug redis-url=redis://redis:6379/0 store=redis", ""},
		{"defaults", map[string]string{},
			"config=/srv/runtime_data/current/config grpc-addr=0.0.0.0:8081 http-addr=0.0.0.0:8080 log-level=warn redis-url=unix:///var/run/nutcracker/ratelimit.sock " +
				"statsd-addr=localhost:8125 statsd-protocol=tcp store=redis", ""},
		{"Envoy Gateway's TLS and Redis from a Secret", with(istioEnv, "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY", "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt", "REDIS_AUTH", "s3cret", "REDIS_TLS", "true",
			"GRPC_MAX_CONNECTION_AGE", "5m", "LOG_LEVEL", "info", "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", ":19001",
			"PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
			"config=/data/ratelimit/config grpc-addr=[::]:8081 grpc-max-connection-age=5m grpc-tls-cert=/certs/tls.crt grpc-tls-key=/certs/tls.key " +
				"http-addr=[::]:8080 log-level=info redis-url=rediss://:s3cret@redis:6379/0 reference-metrics-addr=:19001 " +
				"reference-metrics-mapping=/etc/statsd-exporter/conf.yaml reference-metrics-path=/metrics store=redis",
			"GRPC_SERVER_TLS_CA_CERT"},
		{"a cluster", with(istioEnv, "REDIS_TYPE", "cluster", "REDIS_URL", "a:7000,b:7001,c:7002", "REDIS_AUTH", "user:pw", "CACHE_KEY_PREFIX", "p:"),
			"config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug redis-cluster=true redis-key-prefix=p: " +
				"redis-url=redis://user:pw@a:7000/0?addr=b%3A7001&addr=c%3A7002 store=redis", ""},
		{"sentinels", with(istioEnv, "REDIS_TYPE", "SENTINEL", "REDIS_URL", "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH", "spw"),
			"config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug redis-sentinel-addrs=s1:26379,s2:26379 " +
				"redis-sentinel-master=mymaster redis-sentinel-password=spw redis-url=redis://s1:26379/0 store=redis", ""},
		{"Envoy Gateway's xDS config", with(istioEnv, "CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001",
			"CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
			"config=/data/ratelimit/config config-xds=envoy-gateway:18001 config-xds-node-id=envoy-ratelimit config-xds-tls-ca=/certs/ca.crt " +
				"config-xds-tls-cert=/certs/tls.crt config-xds-tls-key=/certs/tls.key force-start-without-config=true grpc-addr=[::]:8081 " +
				"http-addr=[::]:8080 log-level=debug redis-url=redis://redis:6379/0 store=redis", ""},
		{"the debug port asked for", with(istioEnv, "DEBUG_PORT", "6071", "SHADOW_MODE", "true", "NEAR_LIMIT_RATIO", "0.9", "QUOTA_MODE", "true"),
			"admin-addr=0.0.0.0:6071 config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug near-limit-ratio=0.9 " +
				"redis-url=redis://redis:6379/0 shadow-mode=true store=redis", "QUOTA_MODE"},
	} {
		ref, err := readEnvoyproxyEnv(lookupIn(c.env))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, k := range slices.Sorted(maps.Keys(ref.flags)) {
			got = append(got, k+"="+ref.flags[k])
		}
		var warned []string
		for _, w := range ref.warnings {
			name, _, _ := strings.Cut(w, ":")
			warned = append(warned, name)
		}
		if strings.Join(got, " ") != c.want || strings.Join(warned, " ") != c.warnings {
			t.Errorf("%s:\n got %s\nwant %s\nwarnings %q, want %s", c.name, strings.Join(got, " "), c.want, ref.warnings, c.warnings)
		}
	}
}

func TestEnvoyproxyEnvErrors(t *testing.T) {
	for env, want := range map[string]string{
		"CONFIG_TYPE=JSON":          `CONFIG_TYPE: "JSON": want FILE or GRPC_XDS_SOTW`,
		"BACKEND_TYPE=memcache":     "BACKEND_TYPE: memcache is not supported",
		"GRPC_UDS=/tmp/rl.sock":     "GRPC_UDS: a Unix socket for gRPC is not supported",
		"GRPC_CLIENT_TLS_SAN=envoy": "GRPC_CLIENT_TLS_SAN: checking the client certificate's SAN is not supported",
		"REDIS_PERSECOND=true":      "REDIS_PERSECOND: a second Redis for per-second limits is not supported",
		"MERGE_DOMAIN_CONFIG=true":  "MERGE_DOMAIN_CONFIG: merging one domain from several files is not supported",
		"LOG_LEVEL=loud":            `LOG_LEVEL: "loud": want TRACE, DEBUG`,
		"USE_STATSD=maybe":          `USE_STATSD="maybe": want true or false`,
		"REDIS_TYPE=ring":           `REDIS_URL: REDIS_TYPE="RING": want SINGLE, SENTINEL or CLUSTER`,
		"REDIS_URL=a:1,b:2":         `REDIS_URL: "a:1,b:2": one host:port for REDIS_TYPE=SINGLE`,
		"REDIS_SOCKET_TYPE=unix":    "", // and REDIS_TLS below
		"STATSD_PROTOCOL=quic":      `STATSD_PROTOCOL: "quic": want tcp or udp`,
	} {
		name, value, _ := strings.Cut(env, "=")
		e := map[string]string{"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", name: value}
		if name == "REDIS_SOCKET_TYPE" {
			e["REDIS_TLS"], want = "true", "TLS over a Unix socket is not supported"
		}
		if name == "STATSD_PROTOCOL" {
			e["USE_STATSD"] = "true"
		}
		_, err := readEnvoyproxyEnv(lookupIn(e))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", env, err, want)
		}
	}
}

// TestEnvoyproxyEnvPrecedence: a flag beats an RLS_ variable, which beats
// the reference's variable, which beats the default; as ratelimit, or
// with -env envoyproxy.
func TestEnvoyproxyEnvPrecedence(t *testing.T) {
	env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "ref:6379", "USE_STATSD": "false", "LOG_LEVEL": "error", "RLS_LOG_LEVEL": "info"}
	for _, c := range []struct {
		args      []string
		reference bool
		want      string
	}{
		{nil, true, "redis://ref:6379/0 info redis"},
		{[]string{"-redis-url", "redis://flag:6379/0"}, true, "redis://flag:6379/0 info redis"},
		{[]string{"-env", "envoyproxy", "-store", "memory"}, false, "redis://ref:6379/0 info memory"},
		{nil, false, "redis://127.0.0.1:6379/0 info memory"},
	} {
		s, err := parseFlags(c.args, lookupIn(env), io.Discard, c.reference)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := fmt.Sprint(s.redisURL, " ", s.logLevel.value.String(), " ", s.store.String()); strings.ToLower(got) != c.want {
			t.Errorf("%v (as ratelimit: %v): %s, want %s", c.args, c.reference, got, c.want)
		}
	}
}

// TestConfigGate: with -config-xds and no config yet, the service is not
// ready; once one arrives, it is ready as its store is.
func TestConfigGate(t *testing.T) {
	svc, err := rls.New(rls.Options{Store: okStore{}})
	if err != nil {
		t.Fatal(err)
	}
	g := configGate{Checker: okStore{}, svc: svc}
	if err := g.Check(context.Background()); !errors.Is(err, errNoConfigYet) {
		t.Fatalf("before a config: %v", err)
	}
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "a.yaml", Data: []byte("domain: a\n")})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	if err := g.Check(context.Background()); err != nil {
		t.Fatalf("with a config: %v", err)
	}
}

// okStore admits everything and always answers.
type okStore struct{}

func (okStore) Apply(context.Context, time.Time, []leaky.Bucket, []leaky.Result) error { return nil }
func (okStore) Check(context.Context) error                                            { return nil }
