package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
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
			"config=/srv/runtime_data/current/config config-dotfiles=true grpc-addr=0.0.0.0:8081 http-addr=0.0.0.0:8080 log-level=warn redis-url=unix:///var/run/nutcracker/ratelimit.sock " +
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
			"config=/data/ratelimit/config config-xds=envoy-gateway:18001 config-xds-backoff-factor=0.5 config-xds-backoff-initial=10s " +
				"config-xds-backoff-jitter=true config-xds-backoff-max=1m0s config-xds-node-id=envoy-ratelimit config-xds-tls-ca=/certs/ca.crt " +
				"config-xds-tls-cert=/certs/tls.crt config-xds-tls-key=/certs/tls.key force-start-without-config=true grpc-addr=[::]:8081 " +
				"http-addr=[::]:8080 log-level=debug redis-url=redis://redis:6379/0 store=redis", ""},
		{"the debug port asked for", with(istioEnv, "DEBUG_PORT", "6071", "SHADOW_MODE", "true", "NEAR_LIMIT_RATIO", "0.9", "QUOTA_MODE", "true"),
			"admin-addr=0.0.0.0:6071 config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug near-limit-ratio=0.9 " +
				"quota-mode=true redis-url=redis://redis:6379/0 shadow-mode=true store=redis", ""},
		{"memcached", with(istioEnv, "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "mc1:11211,mc2:11211", "MEMCACHE_MAX_IDLE_CONNS", "10",
			"CACHE_KEY_PREFIX", "p:", "MEMCACHE_TLS", "true", "MEMCACHE_TLS_CACERT", "/certs/ca.crt", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
			"config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug memcached-addrs=mc1:11211,mc2:11211 " +
				"memcached-expiration-jitter=300s memcached-key-prefix=p: memcached-max-idle-conns=10 memcached-tls=true " +
				"memcached-tls-ca=/certs/ca.crt memcached-tls-skip-hostname-verification=true store=memcached", ""},
		{"memcached from SRV", with(istioEnv, "BACKEND_TYPE", "memcache", "MEMCACHE_SRV", "_memcache._tcp.mc.svc", "MEMCACHE_SRV_REFRESH", "30s",
			"EXPIRATION_JITTER_MAX_SECONDS", "0", "MEMCACHE_TLS_CACERT", "/certs/ca.crt"),
			"config=/data/ratelimit/config grpc-addr=[::]:8081 http-addr=[::]:8080 log-level=debug memcached-expiration-jitter=0s " +
				"memcached-srv=_memcache._tcp.mc.svc memcached-srv-refresh=30s store=memcached", "MEMCACHE_TLS_CACERT"},
	} {
		ref, err := readEnvoyproxyEnv(lookupIn(c.env))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, k := range slices.Sorted(maps.Keys(ref.flags)) {
			if v := ref.flags[k]; referenceDefaults[k] != v {
				got = append(got, k+"="+v) // the reference's behaviour is TestEnvoyproxyBehaviour's
			}
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

// referenceDefaults are the flags the reference's environment sets to its
// behaviour when none of its variables says otherwise.
var referenceDefaults = map[string]string{"charge": "always", "match": "leaf", "rate-limit-algorithm": "fixed_window", "response-headers": "none"}

// TestEnvoyproxyBehaviour: started as the reference, envoy-rls decides and
// answers as it does, its defaults included.
func TestEnvoyproxyBehaviour(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // the behaviour's flags, sorted, as name=value
	}{
		{map[string]string{}, "charge=always match=leaf rate-limit-algorithm=fixed_window response-headers=none"},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, "charge=admitted match=leaf rate-limit-algorithm=fixed_window response-headers=none"},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"},
			"charge=always match=leaf rate-limit-algorithm=fixed_window response-header-reset=X-Reset response-headers=envoyproxy"},
		{map[string]string{"RESPONSE_DYNAMIC_METADATA": "true", "QUOTA_MODE": "true"},
			"charge=always match=leaf quota-mode=true rate-limit-algorithm=fixed_window response-dynamic-metadata=true response-headers=none"},
	} {
		ref, err := readEnvoyproxyEnv(lookupIn(c.env))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range slices.Sorted(maps.Keys(ref.flags)) {
			switch k {
			case "charge", "match", "rate-limit-algorithm", "response-headers", "quota-mode", "response-dynamic-metadata",
				"response-header-limit", "response-header-remaining", "response-header-reset":
				got = append(got, k+"="+ref.flags[k])
			}
		}
		if strings.Join(got, " ") != c.want || len(ref.warnings) > 0 {
			t.Errorf("%v:\n got %s (warnings %v)\nwant %s", c.env, strings.Join(got, " "), ref.warnings, c.want)
		}
	}
	// envoy-rls's own rules stay one RLS_ variable away.
	s, err := parseFlags(nil, lookupIn(map[string]string{"RLS_CHARGE": "admitted", "RLS_MATCH": "all", "RLS_RATE_LIMIT_ALGORITHM": "leaky_bucket"}), io.Discard, true)
	if err != nil {
		t.Fatal(err)
	}
	if o := s.configOptions(); o.Charge != descriptors.ChargeAdmitted || o.Leaf || o.RateLimitAlgorithm != limit.LeakyBucket {
		t.Errorf("RLS_ variables beside the reference's: %+v, want envoy-rls's rules", o)
	}
}

func TestEnvoyproxyEnvErrors(t *testing.T) {
	for env, want := range map[string]string{
		"CONFIG_TYPE=JSON":       `CONFIG_TYPE: "JSON": want FILE or GRPC_XDS_SOTW`,
		"BACKEND_TYPE=memcache":  "MEMCACHE_HOST_PORT: BACKEND_TYPE=memcache needs the servers",
		"BACKEND_TYPE=mongo":     `BACKEND_TYPE: "mongo": want redis or memcache`,
		"LOG_LEVEL=loud":         `LOG_LEVEL: "loud": want TRACE, DEBUG`,
		"USE_STATSD=maybe":       `USE_STATSD="maybe": want true or false`,
		"REDIS_TYPE=ring":        `REDIS_URL: REDIS_TYPE="RING": want SINGLE, SENTINEL or CLUSTER`,
		"REDIS_URL=a:1,b:2":      `REDIS_URL: "a:1,b:2": one host:port for REDIS_TYPE=SINGLE`,
		"REDIS_SOCKET_TYPE=unix": "", // and REDIS_TLS below
		"STATSD_PROTOCOL=quic":   `STATSD_PROTOCOL: "quic": want tcp or udp`,
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
		if got := fmt.Sprint(s.redis.url, " ", s.logLevel.value.String(), " ", s.store.String()); strings.ToLower(got) != c.want {
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

func (okStore) Apply(context.Context, time.Time, []limit.Bucket, []limit.Result) error { return nil }
func (okStore) Check(context.Context) error                                            { return nil }

// sameEffectVariables are the reference's variables read by no code here,
// because envoy-rls behaves as they ask either way (docs/migration.md,
// "Running in its place").
var sameEffectVariables = map[string]bool{
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": true, "RUNTIME_WATCH_ROOT": true, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": true,
	"LOCAL_CACHE_SIZE_IN_BYTES": true, "REDIS_USE_EXPLICIT_PIPELINE": true,
	"REDIS_POOL_ON_EMPTY_BEHAVIOR": true, "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": true, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": true,
	"LIMIT_LIMIT_HEADER": true, "LIMIT_REMAINING_HEADER": true, "LIMIT_RESET_HEADER": true,
	"GRPC_SERVER_TLS_KEY": true, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": true, // read with their certificate
}

// sdkVariables are the OpenTelemetry exporter's variables that its SDK
// reads itself, as it does in the reference, once tracing is on.
var sdkVariables = map[string]bool{"OTEL_EXPORTER_OTLP_HEADERS": true, "OTEL_EXPORTER_OTLP_CERTIFICATE": true,
	"OTEL_EXPORTER_OTLP_TIMEOUT": true, "OTEL_EXPORTER_OTLP_COMPRESSION": true}

// TestMigrationTableIsRead: every variable the migration guide's settings
// table names is read when running as ratelimit (some value of it changes
// the flags, the warnings or the errors), or is one the guide says needs no
// setting here.
func TestMigrationTableIsRead(t *testing.T) {
	doc, err := os.ReadFile("../../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	table := string(doc[strings.Index(string(doc), "## Settings"):])
	var names []string
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)`").FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 50 {
		t.Fatalf("found %d variables in the table: the guide's layout changed", len(names))
	}
	base := maps.Clone(istioEnv)
	base["USE_STATSD"] = "true" // so that the StatsD settings show
	outcome := func(env map[string]string) string {
		ref, err := readEnvoyproxyEnv(lookupIn(env))
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprint(ref.flags, ref.warnings)
	}
	was := outcome(base)
	needs := map[string]map[string]string{ // variables that matter only beside another
		"GRPC_SERVER_TLS_CERT": {"GRPC_SERVER_USE_TLS": "true"}, "GRPC_CLIENT_TLS_CACERT": {"GRPC_SERVER_USE_TLS": "true"},
		"CONFIG_GRPC_XDS_SERVER_URL": {"CONFIG_TYPE": "GRPC_XDS_SOTW"}, "CONFIG_GRPC_XDS_NODE_ID": {"CONFIG_TYPE": "GRPC_XDS_SOTW"},
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":    {"CONFIG_TYPE": "GRPC_XDS_SOTW"},
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":   {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"},
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"},
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN": {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "ca.pem"},
		"PROMETHEUS_ADDR": {"USE_PROMETHEUS": "true"}, "PROMETHEUS_PATH": {"USE_PROMETHEUS": "true"}, "PROMETHEUS_MAPPER_YAML": {"USE_PROMETHEUS": "true"},
		"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": {"USE_PROMETHEUS": "true"},
		"REDIS_SENTINEL_AUTH":                      {}, "FORCE_START_WITHOUT_INITIAL_CONFIG": {},
	}
	for _, name := range []string{"CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"} {
		needs[name] = map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
	}
	for _, name := range []string{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH",
		"REDIS_PERSECOND_TLS", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT"} {
		needs[name] = map[string]string{"REDIS_PERSECOND": "true"}
	}
	for _, name := range []string{"MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_TLS", "EXPIRATION_JITTER_MAX_SECONDS"} {
		needs[name] = map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "mc:11211"}
	}
	for _, name := range []string{"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"} {
		needs[name] = map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "mc:11211", "MEMCACHE_TLS": "true"}
	}
	needs["MEMCACHE_SRV_REFRESH"] = map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_SRV": "_memcache._tcp.mc"}
	needs["REDIS_PERSECOND_TYPE"] = map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp"}
	for _, name := range []string{"TRACING_EXPORTER_PROTOCOL", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
		"TRACING_SAMPLING_RATE", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		needs[name] = map[string]string{"TRACING_ENABLED": "true"}
	}
	values := map[string]bool{"SINGLE": true, "SENTINEL": true, "CLUSTER": true, // REDIS_TYPE's, in the same cell
		"WEEK": true} // a unit of the xDS resources' fields
	wildcards := map[string]string{"REDIS_PERSECOND*": "REDIS_PERSECOND"}
	for _, name := range names {
		if sameEffectVariables[name] || sdkVariables[name] || values[name] {
			continue
		}
		if w, ok := wildcards[name]; ok {
			name = w
		}
		read := false
		for _, v := range []string{"true", "false", "9999", "ca.pem", "1.2.3.4", "5s", "0.5", "x", "SENTINEL", "udp", "json", "DEBUG", "memcache", "GRPC_XDS_SOTW", "a:1,b:2", "unix"} {
			env := maps.Clone(base)
			for k, kv := range needs[name] {
				env[k] = kv
			}
			before := outcome(env)
			env[name] = v
			if outcome(env) != before {
				read = true
				break
			}
		}
		if !read {
			t.Errorf("%s is in the migration guide's table, but no value of it changes what ratelimit reads (now %s)", name, was)
		}
	}
}
