package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// minMemoryBytes is the smallest -memory-max-bytes: below it the memory
// store's shards would hold a handful of buckets each.
const minMemoryBytes = 1 << 20

var minMemoryBytesFlag = byteSize(minMemoryBytes)

// settings are the serve command's flags, after the environment.
type settings struct {
	config              string
	grpcAddr            string
	httpAddr            string
	adminAddr           string
	httpJSON            optionalBool
	adminBuckets        optionalBool
	store               choice[storeKind]
	redis               redisFlags
	redisMode           choice[redis.Mode]
	redisKeyPrefix      string
	pprof, adminPage    bool
	redisBatch          int
	redisBatchWait      time.Duration
	breakerTrip         int
	breakerCool         time.Duration
	syncInterval        time.Duration
	memoryMaxBuckets    int
	memoryMaxBytes      byteSize
	snapshot            *snapshotFlags
	maxDescriptors      int
	maxEntries          int
	maxEntryBytes       int
	responseHeaders     choice[rls.Headers]
	logLevel            choice[slog.Level]
	logFormat           choice[logFormat]
	shutdownTimeout     time.Duration
	shutdownDelay       time.Duration
	watchConfig         bool
	failureMode         choice[failureMode]
	storeTimeout        time.Duration
	localCacheSize      int
	shadowMode          bool
	nearLimitRatio      float64
	grpcTLSCert         string
	grpcTLSKey          string
	grpcTLSClientCA     string
	grpcTLSClientSAN    string
	grpcSocketMode      socketMode
	grpcMaxConnAge      time.Duration
	grpcMaxConnAgeGrace time.Duration
	configFlags         *configFlags
	usage               *usageFlags
	env                 choice[envKind]
	xds                 xdsSettings
	perSecond           perSecondSettings
	memcached           memcachedSettings
	statsd              statsdSettings
	refMetrics          refMetricsSettings
	tracing             *tracingFlags
	rlqs                *rlqsSettings
	region              *regionSettings
	// reference is set when started as envoyproxy/ratelimit (its name, or
	// -env envoyproxy): its variables were read.
	reference bool
	// envWarnings are the reference's variables read without their
	// effect, to log once the logger is made.
	envWarnings []string
}

// xdsSettings are the -config-xds flags: the config from an xDS server.
type xdsSettings struct {
	address, nodeID                string
	tlsCA, tlsCert, tlsKey, tlsSAN string
	forceStart                     bool
	client                         xdsClientSettings
}

// refMetricsSettings are the -reference-metrics-* flags: its stats served
// in the Prometheus format.
type refMetricsSettings struct {
	addr, path, mapping string
	responseMillis      bool
}

// envKind is the -env flag: whose environment variables are read beside
// the RLS_ ones.
type envKind int

const (
	rlsEnv envKind = iota
	referenceEnv
)

// algorithmFlag is the -rate-limit-algorithm flag's value.
func algorithmFlag() choice[limit.Algorithm] {
	opts := make([]option[limit.Algorithm], len(limit.Algorithms))
	for i, a := range limit.Algorithms {
		opts[i] = option[limit.Algorithm]{a.String(), a}
	}
	return choice[limit.Algorithm]{limit.LeakyBucket, opts}
}

// algorithmUsage documents -rate-limit-algorithm, for serve and check-config.
const algorithmUsage = "what each rate_limit becomes in files that do not set rate_limit_algorithm: leaky_bucket, sliding_window or fixed_window (envoyproxy/ratelimit's counting)"

// configOptions are how the config files are read.
func (s *settings) configOptions() descriptors.Options {
	return s.memcached.checkConfig(s.store.value, s.configFlags.options())
}

// failureMode is the -failure-mode flag: the service's modes, and local,
// which is a store in front of Redis.
type failureMode int

const (
	failUnavailable failureMode = iota
	failAllow
	failDeny
	failLocal
)

// service returns the service's failure mode for m.
func (m failureMode) service() rls.FailureMode {
	switch m {
	case failAllow:
		return rls.FailAllow
	case failDeny:
		return rls.FailDeny
	}
	return rls.FailUnavailable // local: the fallback store answers itself
}

// answersWhileDown reports whether the service answers calls (so stays
// SERVING) while the store fails.
func (m failureMode) answersWhileDown() bool { return m == failAllow || m == failDeny }

// logFormat is the -log-format flag.
type logFormat int

const (
	textLogs logFormat = iota
	jsonLogs
)

func newFlagSet(output io.Writer) (*flag.FlagSet, *settings) {
	s := &settings{
		store:       choice[storeKind]{memoryStore, []option[storeKind]{{"memory", memoryStore}, {"redis", redisStore}, {"memcached", memcachedStore}}},
		redisMode:   choice[redis.Mode]{redis.ScriptMode, []option[redis.Mode]{{"script", redis.ScriptMode}, {"transactions", redis.TransactionsMode}}},
		failureMode: choice[failureMode]{failUnavailable, []option[failureMode]{{"unavailable", failUnavailable}, {"allow", failAllow}, {"deny", failDeny}, {"local", failLocal}}},
		responseHeaders: choice[rls.Headers]{rls.LeakyHeaders, []option[rls.Headers]{
			{"leaky", rls.LeakyHeaders}, {"envoy", rls.EnvoyHeaders}, {"ietf", rls.IETFHeaders}, {"envoyproxy", rls.EnvoyproxyHeaders}, {"none", rls.NoHeaders}}},
		logLevel: choice[slog.Level]{slog.LevelInfo, []option[slog.Level]{
			{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}},
		logFormat: choice[logFormat]{textLogs, []option[logFormat]{{"text", textLogs}, {"json", jsonLogs}}},
		env:       choice[envKind]{rlsEnv, []option[envKind]{{"rls", rlsEnv}, {"envoyproxy", referenceEnv}}},
		statsd:    statsdSettings{protocol: choice[string]{"tcp", []option[string]{{"tcp", "tcp"}, {"udp", "udp"}}}},
	}
	fs := flag.NewFlagSet("envoy-rls serve", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&s.config, "config", "config", "YAML config `file or directory` (*.yaml, *.yml)")
	s.configFlags = newConfigFlags(fs)
	s.usage = newUsageFlags(fs)
	fs.StringVar(&s.xds.address, "config-xds", "", "take the config from this xDS server (`host:port`), over ADS, instead of -config's files: RateLimitConfig resources, as envoyproxy/ratelimit takes them from Envoy Gateway")
	fs.StringVar(&s.xds.nodeID, "config-xds-node-id", "envoy-rls", "the node id this service gives the xDS server")
	fs.StringVar(&s.xds.tlsCA, "config-xds-tls-ca", "", "PEM `file` of the CA of the xDS server's certificate: connect with TLS")
	fs.StringVar(&s.xds.tlsCert, "config-xds-tls-cert", "", "PEM `file` of a client certificate for the xDS server (mutual TLS)")
	fs.StringVar(&s.xds.tlsKey, "config-xds-tls-key", "", "PEM `file` of the client certificate's key")
	fs.StringVar(&s.xds.tlsSAN, "config-xds-tls-server-name", "", "the name the xDS server's certificate must hold, if not its address's host")
	fs.BoolVar(&s.xds.forceStart, "force-start-without-config", false, "start without a config, reporting SERVING and allowing every request until one is in force: with -config-xds, before the first arrives (instead of NOT_SERVING); with -config, when its files are missing or invalid (instead of exiting), taking them once they load")
	s.xds.client.register(fs)
	fs.StringVar(&s.statsd.addr, "statsd-addr", "", "send envoyproxy/ratelimit's stats, under its names, to this StatsD server (`host:port`), such as a statsd_exporter sidecar")
	fs.Var(&s.statsd.protocol, "statsd-protocol", "tcp or udp, to reach -statsd-addr")
	fs.DurationVar(&s.statsd.interval, "statsd-flush-interval", 10*time.Second, "how often the stats are sent to -statsd-addr")
	s.statsd.registerDogStatsD(fs)
	fs.StringVar(&s.refMetrics.addr, "reference-metrics-addr", "", "serve envoyproxy/ratelimit's stats in the Prometheus format, named as it names them, on this `address` (its USE_PROMETHEUS); empty: off")
	fs.StringVar(&s.refMetrics.path, "reference-metrics-path", "/metrics", "the path of -reference-metrics-addr")
	fs.StringVar(&s.refMetrics.mapping, "reference-metrics-mapping", "", "statsd_exporter mapping `file` naming those metrics (its PROMETHEUS_MAPPER_YAML); empty: the reference's default names")
	fs.BoolVar(&s.refMetrics.responseMillis, "reference-metrics-response-ms", false, "with the default names, the response time in milliseconds rather than seconds (its PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)")
	fs.Var(&s.env, "env", "also read envoyproxy/ratelimit's environment variables (envoyproxy), as when started as ratelimit; flags and RLS_ variables beat them")
	fs.StringVar(&s.grpcAddr, "grpc-addr", ":8081", "`address` of the RLS v3 gRPC server (also grpc.health.v1 and reflection): host:port, or unix:///path for a Unix socket")
	fs.StringVar(&s.httpAddr, "http-addr", ":8080", "`address` of the HTTP server (/healthz, /readyz, /metrics, POST /json)")
	fs.StringVar(&s.adminAddr, "admin-addr", "127.0.0.1:6070", "`address` of the admin server (the operator's page at /, /config, POST /explain, GET and DELETE /buckets, /debug/pprof/ with -pprof); keep it private; empty turns it off")
	fs.BoolVar(&s.adminPage, "admin-page", true, "serve the operator's page at / on the admin address, and count what it shows (decisions per limit, the buckets refused most); false: neither")
	fs.Var(&s.adminBuckets, "admin-buckets", "serve POST /explain and GET and DELETE /buckets on the admin address; default (auto): on, but off when -grpc-tls-client-ca requires client certificates, since the admin server checks none")
	fs.Var(&s.httpJSON, "http-json", "serve POST /json on the HTTP address; default (auto): on, but off when -grpc-tls-client-ca requires client certificates, since /json has none")
	fs.Var(&s.store, "store", "bucket `store`: memory (one replica), redis or memcached (several)")
	s.redis.register(fs, "redis", "Redis", "redis://127.0.0.1:6379/0", "Redis `URL`: redis:// or rediss:// (TLS), go-redis syntax")
	fs.Var(&s.redisMode, "redis-mode", "script (one Lua call per request) or transactions (WATCH/MULTI/EXEC, for servers without scripting)")
	s.perSecond.register(fs)
	s.memcached.register(fs)
	fs.StringVar(&s.redisKeyPrefix, "redis-key-prefix", redis.DefaultPrefix, "start of every Redis key, so that several deployments can share one Redis")
	fs.DurationVar(&s.syncInterval, "sync-interval", 0, "with -store redis: 0 decides every request on Redis (exact); above 0, the local-first mode: decide in process against units Redis leases to this replica, and sync with Redis once per interval (docs/operations.md, Local-first mode, says what it guarantees)")
	fs.IntVar(&s.redisBatch, "redis-batch-requests", redis.DefaultBatch, "most requests of concurrent calls one script call decides, when their buckets share a slot (each still all or nothing, in arrival order); 0 or 1: a script call per request")
	fs.DurationVar(&s.redisBatchWait, "redis-batch-wait", 0, "how long requests for Redis wait for more before their script call is sent, while fewer than -redis-batch-requests; 0 sends at once (the default; with -sync-interval and not -redis-cluster, "+localFirstBatchWait.String()+")")
	fs.IntVar(&s.breakerTrip, "redis-breaker-timeouts", breaker.DefaultTrip, "script calls in a row that time out on a Redis node after which its calls are answered by the failure mode at once, for -redis-breaker-cool, then one probes it (calls given under 10ms do not count); 0 turns it off")
	fs.DurationVar(&s.breakerCool, "redis-breaker-cool", breaker.DefaultCool, "how long a Redis node that kept timing out gets no calls before one probes it")
	fs.IntVar(&s.memoryMaxBuckets, "memory-max-buckets", memory.DefaultMaxBuckets, "most buckets the memory store keeps; beyond, those nearest to empty are dropped")
	s.memoryMaxBytes = memory.DefaultMaxBytes
	fs.Var(&s.memoryMaxBytes, "memory-max-bytes", "most `bytes` the memory store (and, with Redis, the local over-limit cache and the local fallback) keep, counting keys and per-bucket overhead, e.g. 256MiB")
	s.snapshot = newSnapshotFlags(fs)
	fs.IntVar(&s.maxDescriptors, "max-descriptors", rls.DefaultMaxDescriptors, "most descriptors in one request; more is InvalidArgument")
	fs.IntVar(&s.maxEntries, "max-entries", rls.DefaultMaxEntries, "most entries in one descriptor; more is InvalidArgument")
	fs.IntVar(&s.maxEntryBytes, "max-entry-bytes", rls.DefaultMaxEntryBytes, "most bytes in one entry's key or value; more is InvalidArgument")
	fs.Var(&s.responseHeaders, "response-headers", "response headers to add: leaky (X-RateLimit-Remaining, -Clear, -Reset, Retry-After), envoy (only -Clear and Retry-After, beside Envoy's enable_x_ratelimit_headers), ietf (the IETF draft's RateLimit-Policy and RateLimit, Retry-After), envoyproxy (envoyproxy/ratelimit's RateLimit-Limit, -Remaining, -Reset, named by -response-header-*) or none")
	fs.Var(&s.logLevel, "log-level", "log `level`: debug, info, warn or error")
	fs.Var(&s.logFormat, "log-format", "log `format`: text or json")
	fs.DurationVar(&s.shutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGTERM, how long in-flight calls may take before the server stops anyway")
	fs.DurationVar(&s.shutdownDelay, "shutdown-delay", 0, "on SIGTERM, how long to go on serving while reporting NOT_SERVING, so load balancers drain first")
	s.tracing = newTracingFlags(fs)
	s.rlqs = newRLQSFlags(fs)
	s.region = newRegionFlags(fs)
	fs.BoolVar(&s.pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on the admin address (to find where time goes)")
	fs.BoolVar(&s.watchConfig, "watch-config", true, "reload the config when its files change (SIGHUP always reloads)")
	fs.Var(&s.failureMode, "failure-mode", "`what` to answer when the store fails: unavailable (gRPC Unavailable), allow, deny, or local (decide on this replica's memory until Redis or memcached is back)")
	fs.DurationVar(&s.storeTimeout, "store-timeout", 100*time.Millisecond, "cap on every store call, which also ends a margin (a quarter of the time left, 1 to 10ms) before the call's own deadline, so the failure mode answers in time")
	fs.IntVar(&s.localCacheSize, "local-cache-size", 100000, "buckets the local over-limit cache may hold (Redis and memcached stores); 0 turns it off")
	fs.BoolVar(&s.shadowMode, "shadow-mode", false, "global shadow mode: decide, charge and count every limit, but reject nothing")
	fs.Float64Var(&s.nearLimitRatio, "near-limit-ratio", 0.8, "share of a bucket past which an admitted request counts as near the limit (metrics)")
	fs.StringVar(&s.grpcTLSCert, "grpc-tls-cert", "", "PEM `file` of the gRPC server's certificate: serve TLS (reloaded when it changes)")
	fs.StringVar(&s.grpcTLSKey, "grpc-tls-key", "", "PEM `file` of the gRPC server's key")
	fs.StringVar(&s.grpcTLSClientCA, "grpc-tls-client-ca", "", "PEM `file` of the CA of client certificates: require them (mutual TLS)")
	fs.StringVar(&s.grpcTLSClientSAN, "grpc-tls-client-san", "", "with -grpc-tls-client-ca: accept only client certificates holding this `name` among their DNS (or, for an IP address, IP) SANs")
	fs.Var(&s.grpcSocketMode, "grpc-socket-mode", "with -grpc-addr unix:///path: the socket's `permissions`, in octal (such as 0660); default: as the umask leaves them")
	fs.DurationVar(&s.grpcMaxConnAge, "grpc-max-connection-age", 24*time.Hour, "close a gRPC connection (GOAWAY, ±10% jitter) after this long, so that clients such as Envoy spread over new replicas; 0 keeps connections for ever")
	fs.DurationVar(&s.grpcMaxConnAgeGrace, "grpc-max-connection-age-grace", time.Hour, "after -grpc-max-connection-age, how long the calls in flight may take before the connection is closed anyway")
	return fs, s
}

// parseFlags reads the flags, then RLS_* variables for the flags not given,
// and checks the values.
//
// With reference set (the binary runs as ratelimit), or -env envoyproxy,
// envoyproxy/ratelimit's variables then set the flags neither given nor
// set by an RLS_ variable.
func parseFlags(args []string, lookupEnv func(string) (string, bool), output io.Writer, reference bool) (*settings, error) {
	fs, s := newFlagSet(output)
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := applyEnv(fs, lookupEnv); err != nil {
		return nil, err
	}
	if reference || s.env.value == referenceEnv {
		if err := applyEnvoyproxyEnv(fs, s, lookupEnv); err != nil {
			return nil, err
		}
		s.reference = true
	}
	given := false
	fs.Visit(func(f *flag.Flag) {
		given = given || f.Name == "redis-batch-wait"
		s.snapshot.intervalGiven = s.snapshot.intervalGiven || f.Name == "memory-snapshot-interval"
		s.statsd.protocolGiven = s.statsd.protocolGiven || f.Name == "statsd-protocol"
	})
	if !given && s.syncInterval > 0 && !s.redis.cluster {
		s.redisBatchWait = localFirstBatchWait
	}
	s.perSecond.noteGiven(fs)
	s.rlqs.noteGiven(fs, s.failureMode.value)
	return s, s.check()
}

// localFirstBatchWait is -redis-batch-wait's default in the local-first
// mode: its requests that reach Redis, for buckets seen once, are few at
// a time, and a call for each would cost Redis and the service twice
// what a call of several costs per request. (Not on a Redis Cluster: a
// call's keys share a hash slot, and the buckets seen once are spread
// over all of them, so a wait would gather nothing.)
const localFirstBatchWait = time.Millisecond

// localFirstPaces is how many batch waits apart a slot's calls go in the
// local-first mode while requests keep coming (redis.Options.BatchPace):
// its requests that reach Redis come a few at a time, and on a busy
// machine each round trip costs Redis and the service more than their
// buckets do. 4 (4ms at the default wait) cut Redis's CPU per request by
// a fifth at Zipf s=1.1 (docs/performance.md), the wait falling on the
// requests that reach Redis only.
const localFirstPaces = 4

// batchPace is the Redis store's batch pace: localFirstPaces batch waits
// in the local-first mode, none in exact mode.
func (s *settings) batchPace() time.Duration {
	if s.syncInterval <= 0 {
		return 0
	}
	return localFirstPaces * s.redisBatchWait
}

// applyEnvoyproxyEnv sets the flags not yet set from envoyproxy/ratelimit's
// variables.
func applyEnvoyproxyEnv(fs *flag.FlagSet, s *settings, lookupEnv func(string) (string, bool)) error {
	ref, err := readEnvoyproxyEnv(lookupEnv)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true }) // given, or set by RLS_ variables
	for _, name := range slices.Sorted(maps.Keys(ref.flags)) {
		if set[name] {
			continue
		}
		if err := fs.Set(name, ref.flags[name]); err != nil {
			return fmt.Errorf("envoyproxy/ratelimit's environment: -%s %q: %v", name, ref.flags[name], err)
		}
	}
	s.envWarnings = ref.warnings
	return nil
}

// applyEnv sets each flag not given on the command line from its RLS_*
// variable, if set: a flag beats its variable.
func applyEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v, ok := lookupEnv(name); ok && !given[f.Name] && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, serr)
			}
		}
	})
	return err
}

// envName is the variable that sets a flag: RLS_ and the name in upper case
// with '-' as '_'.
func envName(flagName string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (s *settings) check() error {
	switch {
	case s.config == "":
		return fmt.Errorf("-config: must name a file or directory")
	case s.redisBatch < 0:
		return fmt.Errorf("-redis-batch-requests: must be 0 or more, got %d", s.redisBatch)
	case s.syncInterval < 0:
		return fmt.Errorf("-sync-interval: must not be negative, got %s", s.syncInterval)
	case s.syncInterval > 0 && s.store.value != redisStore:
		return fmt.Errorf("-sync-interval: the local-first mode syncs with Redis: it needs -store redis")
	case s.syncInterval > 0 && s.redisMode.value != redis.ScriptMode:
		return fmt.Errorf("-sync-interval: the local-first mode needs -redis-mode script")
	case s.breakerTrip < 0:
		return fmt.Errorf("-redis-breaker-timeouts: must be 0 or more, got %d", s.breakerTrip)
	case s.breakerCool <= 0:
		return fmt.Errorf("-redis-breaker-cool: must be above 0, got %v", s.breakerCool)
	case s.redisBatchWait < 0:
		return fmt.Errorf("-redis-batch-wait: must not be negative, got %v", s.redisBatchWait)
	case s.memoryMaxBuckets < 1:
		return fmt.Errorf("-memory-max-buckets: must be at least 1, got %d", s.memoryMaxBuckets)
	case s.memoryMaxBytes < minMemoryBytes:
		return fmt.Errorf("-memory-max-bytes: must be at least %s, got %s", &minMemoryBytesFlag, &s.memoryMaxBytes)
	case s.maxDescriptors < 1 || s.maxEntries < 1 || s.maxEntryBytes < 1:
		return fmt.Errorf("-max-descriptors, -max-entries and -max-entry-bytes must be at least 1")
	case s.pprof && s.adminAddr == "":
		return fmt.Errorf("-pprof serves on the admin address: it needs -admin-addr")
	case (s.xds.tlsCert == "") != (s.xds.tlsKey == ""):
		return fmt.Errorf("-config-xds-tls-cert and -config-xds-tls-key go together")
	case s.xds.address == "" && (s.xds.tlsCA != "" || s.xds.tlsCert != ""):
		return fmt.Errorf("-config-xds-tls-* need -config-xds")
	case s.statsd.interval <= 0:
		return fmt.Errorf("-statsd-flush-interval: must be positive, got %s", s.statsd.interval)
	case s.refMetrics.addr != "" && !strings.HasPrefix(s.refMetrics.path, "/"):
		return fmt.Errorf("-reference-metrics-path: must start with /, got %q", s.refMetrics.path)
	case s.grpcMaxConnAge < 0 || s.grpcMaxConnAgeGrace < 0:
		return fmt.Errorf("-grpc-max-connection-age and -grpc-max-connection-age-grace must not be negative")
	case s.shutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout: must be positive, got %s", s.shutdownTimeout)
	case s.shutdownDelay < 0:
		return fmt.Errorf("-shutdown-delay: must not be negative, got %s", s.shutdownDelay)
	case s.failureMode.value == failLocal && s.store.value == memoryStore:
		return fmt.Errorf("-failure-mode local falls back from Redis or memcached: it needs -store redis or memcached")
	case s.storeTimeout < 0:
		return fmt.Errorf("-store-timeout: must not be negative, got %s", s.storeTimeout)
	case s.rlqs.failStatic < 0:
		return fmt.Errorf("-rlqs-fail-static: must not be negative, got %s", s.rlqs.failStatic)
	case s.localCacheSize < 0:
		return fmt.Errorf("-local-cache-size: must not be negative, got %d", s.localCacheSize)
	case s.nearLimitRatio <= 0 || s.nearLimitRatio > 1:
		return fmt.Errorf("-near-limit-ratio: must be in (0, 1], got %g", s.nearLimitRatio)
	case (s.grpcTLSCert == "") != (s.grpcTLSKey == ""):
		return fmt.Errorf("-grpc-tls-cert and -grpc-tls-key go together")
	case s.grpcTLSClientSAN != "" && s.grpcTLSClientCA == "":
		return fmt.Errorf("-grpc-tls-client-san checks client certificates: it needs -grpc-tls-client-ca")
	case s.grpcSocketMode.set && !isUnixAddr(s.grpcAddr):
		return fmt.Errorf("-grpc-socket-mode: -grpc-addr %q is not a Unix socket (unix:///path)", s.grpcAddr)
	case s.grpcTLSClientCA != "" && s.grpcTLSCert == "":
		return fmt.Errorf("-grpc-tls-client-ca needs -grpc-tls-cert and -grpc-tls-key")
	}
	if err := s.snapshot.check(s.store.value); err != nil {
		return err
	}
	if err := s.statsd.check(); err != nil {
		return err
	}
	if err := s.redis.check(); err != nil {
		return err
	}
	if err := s.perSecond.check(s.store.value); err != nil {
		return err
	}
	if err := s.memcached.check(s.store.value); err != nil {
		return err
	}
	if err := s.region.check(s.store.value); err != nil {
		return err
	}
	if s.region.name != "" && s.redisMode.value != redis.ScriptMode {
		return fmt.Errorf("-region needs -redis-mode script: regions exchange their reports in a script call")
	}
	if err := s.xds.client.check(s.xds.address); err != nil {
		return err
	}
	return s.tracing.check()
}

func (s *settings) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.logLevel.value}
	if s.logFormat.value == jsonLogs {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
