package main

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
)

// The reference's environment: started as ratelimit (the name of
// envoyproxy/ratelimit's binary, which images made for it run) or with
// -env envoyproxy, the service reads envoyproxy/ratelimit's environment
// variables, with their meanings and defaults, as flag values. A flag on
// the command line and an RLS_ variable beat them. Each variable the
// reference reads is honoured, or has the same effect here without a
// setting, or is a warning (the service runs, without that effect), or an
// error (it cannot run as asked).

// referenceName is the name of envoyproxy/ratelimit's binary.
const referenceName = "ratelimit"

// envoyproxyEnv is what the reference's variables set.
type envoyproxyEnv struct {
	flags    map[string]string // flag name: value
	warnings []string
}

// readEnvoyproxyEnv maps envoyproxy/ratelimit's variables to flag values.
func readEnvoyproxyEnv(lookup func(string) (string, bool)) (*envoyproxyEnv, error) {
	r := &envoyReader{lookup: lookup, out: &envoyproxyEnv{flags: map[string]string{}}}
	r.addresses()
	r.tls()
	r.logs()
	r.config()
	r.store()
	r.metrics()
	r.behaviour()
	r.tracing()
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("envoyproxy/ratelimit's environment: %s", strings.Join(r.errs, "; "))
	}
	return r.out, nil
}

type envoyReader struct {
	lookup func(string) (string, bool)
	out    *envoyproxyEnv
	errs   []string
}

// get returns a variable's value, or def when it is unset or empty.
func (r *envoyReader) get(name, def string) string {
	if v, ok := r.lookup(name); ok && v != "" {
		return v
	}
	return def
}

// on reads a true/false variable as the reference does (Go's ParseBool),
// def when unset.
func (r *envoyReader) on(name string, def bool) bool {
	v, ok := r.lookup(name)
	if !ok || v == "" {
		return def
	}
	switch strings.ToLower(v) {
	case "1", "t", "true":
		return true
	case "0", "f", "false":
		return false
	}
	r.errs = append(r.errs, fmt.Sprintf("%s=%q: want true or false", name, v))
	return def
}

func (r *envoyReader) set(flag, value string) { r.out.flags[flag] = value }

// copy sets flag from a variable when it is set.
func (r *envoyReader) copy(name, flag string) {
	if v := r.get(name, ""); v != "" {
		r.set(flag, v)
	}
}

func (r *envoyReader) warn(name, format string, args ...any) {
	r.out.warnings = append(r.out.warnings, name+": "+fmt.Sprintf(format, args...))
}

func (r *envoyReader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, name+": "+fmt.Sprintf(format, args...))
}

// given reports whether any of the variables is set to something.
func (r *envoyReader) given(names ...string) bool {
	for _, n := range names {
		if r.get(n, "") != "" {
			return true
		}
	}
	return false
}

func (r *envoyReader) addresses() {
	r.set("http-addr", net.JoinHostPort(r.get("HOST", "0.0.0.0"), r.get("PORT", "8080")))
	if uds := r.get("GRPC_UDS", ""); uds != "" {
		// As in the reference: the socket instead of GRPC_HOST:GRPC_PORT.
		if strings.HasPrefix(uds, "/") {
			r.set("grpc-addr", "unix://"+uds)
		} else {
			r.set("grpc-addr", "unix:"+uds)
		}
		if r.given("GRPC_HOST", "GRPC_PORT") {
			r.warn("GRPC_HOST", "GRPC_HOST and GRPC_PORT are not read with GRPC_UDS, as in envoyproxy/ratelimit: gRPC is served on the socket only")
		}
	} else {
		r.set("grpc-addr", net.JoinHostPort(r.get("GRPC_HOST", "0.0.0.0"), r.get("GRPC_PORT", "8081")))
	}
	// The debug port serves the config and profiles: it stays on loopback
	// unless asked for, where the reference listens on every address.
	if r.given("DEBUG_HOST", "DEBUG_PORT") {
		r.set("admin-addr", net.JoinHostPort(r.get("DEBUG_HOST", "0.0.0.0"), r.get("DEBUG_PORT", "6070")))
	}
	r.copy("GRPC_MAX_CONNECTION_AGE", "grpc-max-connection-age")
	r.copy("GRPC_MAX_CONNECTION_AGE_GRACE", "grpc-max-connection-age-grace")
}

func (r *envoyReader) tls() {
	if r.on("GRPC_SERVER_USE_TLS", false) {
		r.copy("GRPC_SERVER_TLS_CERT", "grpc-tls-cert")
		r.copy("GRPC_SERVER_TLS_KEY", "grpc-tls-key")
		r.copy("GRPC_CLIENT_TLS_CACERT", "grpc-tls-client-ca")
		if r.given("GRPC_CLIENT_TLS_CACERT") {
			r.copy("GRPC_CLIENT_TLS_SAN", "grpc-tls-client-san")
		} else if r.given("GRPC_CLIENT_TLS_SAN") {
			r.warn("GRPC_CLIENT_TLS_SAN", "not checked without GRPC_CLIENT_TLS_CACERT, as in envoyproxy/ratelimit: no client certificate is asked for")
		}
	} else if r.given("GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN") {
		r.warn("GRPC_SERVER_TLS_CERT", "not read without GRPC_SERVER_USE_TLS=true, as in envoyproxy/ratelimit: gRPC is served without TLS")
	}
	if r.given("GRPC_SERVER_TLS_CA_CERT") {
		r.warn("GRPC_SERVER_TLS_CA_CERT", "not read, as envoyproxy/ratelimit does not read it: client certificates are required by GRPC_CLIENT_TLS_CACERT only")
	}
}

// logLevels maps the reference's (logrus) levels to ours.
var logLevels = map[string]string{"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
	"error": "error", "fatal": "error", "panic": "error"}

func (r *envoyReader) logs() {
	level := strings.ToLower(r.get("LOG_LEVEL", "WARN"))
	if l, ok := logLevels[level]; ok {
		r.set("log-level", l)
	} else {
		r.fail("LOG_LEVEL", "%q: want TRACE, DEBUG, INFO, WARN, ERROR, FATAL or PANIC", level)
	}
	r.copy("LOG_FORMAT", "log-format")
}

func (r *envoyReader) config() {
	switch t := strings.ToUpper(r.get("CONFIG_TYPE", "FILE")); t {
	case "FILE":
	case "GRPC_XDS_SOTW":
		r.xds()
	default:
		r.fail("CONFIG_TYPE", "%q: want FILE or GRPC_XDS_SOTW", t)
	}
	r.set("config", path.Join(r.get("RUNTIME_ROOT", "/srv/runtime_data/current"), r.get("RUNTIME_SUBDIRECTORY", ""), r.get("RUNTIME_APPDIRECTORY", "config")))
	// RUNTIME_WATCH_ROOT chooses what the reference watches (the root, or
	// the directory under it); envoy-rls watches the config directory and
	// follows Kubernetes volume swaps either way. The reference reads dot
	// files unless told not to; here a Kubernetes volume's ..data and
	// ..<timestamp> entries are skipped even then (the reference, walking
	// into them, would read each file twice).
	if !r.on("RUNTIME_IGNOREDOTFILES", false) {
		r.set("config-dotfiles", "true")
	}
	if r.on("MERGE_DOMAIN_CONFIG", false) {
		r.set("merge-domains", "true")
	}
	// With files, as with xDS: start without a config, and take it once
	// it loads.
	if r.on("FORCE_START_WITHOUT_INITIAL_CONFIG", false) {
		r.set("force-start-without-config", "true")
	}
}

// xds reads the settings of the config's xDS server.
func (r *envoyReader) xds() {
	r.set("config-xds", r.get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"))
	r.set("config-xds-node-id", r.get("CONFIG_GRPC_XDS_NODE_ID", "default"))
	if r.on("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		r.copy("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "config-xds-tls-ca")
		r.copy("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "config-xds-tls-cert")
		r.copy("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "config-xds-tls-key")
		r.copy("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "config-xds-tls-server-name")
		if !r.given("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT") {
			r.fail("CONFIG_GRPC_XDS_SERVER_USE_TLS", "TLS needs CONFIG_GRPC_XDS_SERVER_TLS_CACERT or a client certificate")
		}
	}
	r.xdsClient()
}

func (r *envoyReader) store() {
	switch b := strings.ToLower(r.get("BACKEND_TYPE", "redis")); b {
	case "redis":
		r.set("store", "redis")
	case "memcache":
		r.set("store", "memcached")
		r.memcache()
		return
	default:
		r.fail("BACKEND_TYPE", "%q: want redis or memcache", b)
		return
	}
	// The TLS files are the first Redis's unless only the per-second one
	// speaks TLS (the reference reads one set for both).
	perSecond := r.on("REDIS_PERSECOND", false)
	secondTLS := perSecond && r.on("REDIS_PERSECOND_TLS", false)
	r.redis(firstRedis, r.on("REDIS_TLS", false) || !secondTLS)
	if perSecond {
		r.redis(perSecondRedis, secondTLS)
	}
	r.copy("CACHE_KEY_PREFIX", "redis-key-prefix")
}

// redisVars name the variables of one Redis (REDIS_ or REDIS_PERSECOND_)
// and its flags (-redis- or -redis-persecond-).
type redisVars struct{ env, flag, socket string }

var (
	firstRedis     = redisVars{env: "REDIS_", flag: "redis-", socket: "/var/run/nutcracker/ratelimit.sock"}
	perSecondRedis = redisVars{env: "REDIS_PERSECOND_", flag: "redis-persecond-", socket: "/var/run/nutcracker/ratelimitpersecond.sock"}
)

// redis sets the flags of one Redis; with tlsFiles, REDIS_TLS_*'s files.
func (r *envoyReader) redis(v redisVars, tlsFiles bool) {
	u, err := r.redisURL(v)
	if err != nil {
		r.fail(v.env+"URL", "%v", err)
		return
	}
	r.set(v.flag+"url", u)
	r.copy(v.env+"POOL_SIZE", v.flag+"pool-size")
	r.copy(v.env+"SENTINEL_AUTH", v.flag+"sentinel-password")
	if tlsFiles {
		r.copy("REDIS_TLS_CLIENT_CERT", v.flag+"tls-cert")
		r.copy("REDIS_TLS_CLIENT_KEY", v.flag+"tls-key")
		r.copy("REDIS_TLS_CACERT", v.flag+"tls-ca")
	}
	r.copy(v.env+"PIPELINE_WINDOW", v.flag+"pipeline-window")
	r.copy(v.env+"PIPELINE_LIMIT", v.flag+"pipeline-limit")
	if t := r.get(v.env+"TIMEOUT", ""); t != "" {
		r.set(v.flag+"dial-timeout", t)
		r.set(v.flag+"read-timeout", t)
	}
}

// redisURL builds one Redis's URL flag, and its Sentinel or Cluster
// flags, from REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_URL, REDIS_AUTH and
// REDIS_TLS (or their REDIS_PERSECOND_ forms).
func (r *envoyReader) redisURL(v redisVars) (string, error) {
	addr := r.get(v.env+"URL", v.socket)
	var user *url.Userinfo
	if auth := r.get(v.env+"AUTH", ""); auth != "" {
		// "password", or "user:password".
		if name, pass, ok := strings.Cut(auth, ":"); ok {
			user = url.UserPassword(name, pass)
		} else {
			user = url.UserPassword("", auth)
		}
	}
	scheme := "redis"
	if r.on(v.env+"TLS", false) {
		scheme = "rediss"
	}
	q := url.Values{}
	if r.on("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
		q.Set("skip_verify", "true")
	}
	if strings.ToLower(r.get(v.env+"SOCKET_TYPE", "unix")) == "unix" {
		if r.on(v.env+"TLS", false) {
			return "", fmt.Errorf("TLS over a Unix socket is not supported")
		}
		return (&url.URL{Scheme: "unix", Path: addr, User: user}).String(), nil
	}
	nodes := strings.Split(addr, ",")
	switch t := strings.ToUpper(r.get(v.env+"TYPE", "SINGLE")); t {
	case "SINGLE":
		if len(nodes) > 1 {
			return "", fmt.Errorf("%q: one host:port for %sTYPE=SINGLE", addr, v.env)
		}
	case "SENTINEL":
		// "master,sentinel:port,sentinel:port"
		if len(nodes) < 2 {
			return "", fmt.Errorf("%q: want the master's name, then the sentinels' host:port, comma-separated", addr)
		}
		r.set(v.flag+"sentinel-master", nodes[0])
		r.set(v.flag+"sentinel-addrs", strings.Join(nodes[1:], ","))
		nodes = nodes[1:2] // the URL carries the auth and TLS; its host is not dialled
	case "CLUSTER":
		r.set(v.flag+"cluster", "true")
		for _, n := range nodes[1:] {
			q.Add("addr", n)
		}
	default:
		return "", fmt.Errorf("%sTYPE=%q: want SINGLE, SENTINEL or CLUSTER", v.env, t)
	}
	return (&url.URL{Scheme: scheme, Host: nodes[0], User: user, Path: "/0", RawQuery: q.Encode()}).String(), nil
}

func (r *envoyReader) metrics() {
	r.copy("NEAR_LIMIT_RATIO", "near-limit-ratio")
	if r.on("DISABLE_STATS", false) {
		return
	}
	dog := r.on("USE_DOG_STATSD", false)
	if r.on("USE_STATSD", true) {
		if dog {
			r.fail("USE_DOG_STATSD", "needs USE_STATSD=false, as in envoyproxy/ratelimit: one StatsD sink at a time")
		}
		r.set("statsd-addr", net.JoinHostPort(r.get("STATSD_HOST", "localhost"), r.get("STATSD_PORT", "8125")))
		switch p := strings.ToLower(r.get("STATSD_PROTOCOL", "tcp")); p {
		case "tcp", "udp":
			r.set("statsd-protocol", p)
		default:
			r.fail("STATSD_PROTOCOL", "%q: want tcp or udp", p)
		}
		r.copy("STATS_FLUSH_INTERVAL", "statsd-flush-interval")
	}
	if r.on("USE_PROMETHEUS", false) {
		r.set("reference-metrics-addr", r.get("PROMETHEUS_ADDR", ":9090"))
		r.set("reference-metrics-path", r.get("PROMETHEUS_PATH", "/metrics"))
		r.copy("PROMETHEUS_MAPPER_YAML", "reference-metrics-mapping")
		if r.on("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false) {
			r.set("reference-metrics-response-ms", "true")
		}
	}
	r.dogStatsD(dog)
	r.extraTags()
}

// behaviour sets what the reference decides and answers, its defaults
// included: rate_limit is a fixed window, only the deepest matching limit
// of a descriptor counts, every hit is charged (past the limit: its INCRBY
// runs whatever the answer), and no header is added unless asked for.
// Each stays one RLS_ variable away from envoy-rls's own rule
// (RLS_RATE_LIMIT_ALGORITHM, RLS_MATCH, RLS_CHARGE, RLS_RESPONSE_HEADERS).
func (r *envoyReader) behaviour() {
	r.set("rate-limit-algorithm", "fixed_window")
	r.set("match", "leaf")
	if r.on("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		r.set("charge", "admitted")
	} else {
		r.set("charge", "always")
	}
	if r.on("SHADOW_MODE", false) {
		r.set("shadow-mode", "true")
	}
	if r.on("QUOTA_MODE", false) {
		r.set("quota-mode", "true")
	}
	if r.on("RESPONSE_DYNAMIC_METADATA", false) {
		r.set("response-dynamic-metadata", "true")
	}
	if r.on("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		r.set("response-headers", "envoyproxy")
		r.copy("LIMIT_LIMIT_HEADER", "response-header-limit")
		r.copy("LIMIT_REMAINING_HEADER", "response-header-remaining")
		r.copy("LIMIT_RESET_HEADER", "response-header-reset")
	} else {
		r.set("response-headers", "none")
	}
}
