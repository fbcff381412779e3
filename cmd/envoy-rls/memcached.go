package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/store/fallback"
	"github.com/envoy-rls/envoy-rls/pkg/store/memcached"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// memcachedSettings are the -memcached-* flags: the store of -store
// memcached (envoyproxy/ratelimit's BACKEND_TYPE=memcache).
type memcachedSettings struct {
	addrs, srv             string
	srvRefresh             time.Duration
	maxIdleConns           int
	timeout                time.Duration
	tls                    bool
	tlsCA, tlsCert, tlsKey string
	tlsSkipHostnameVerify  bool
	keyPrefix              string
	ownKeys                bool
	expirationJitter       time.Duration
	fs                     *flag.FlagSet // to see which -memcached-* flags are set
}

func (m *memcachedSettings) register(fs *flag.FlagSet) {
	m.fs = fs
	fs.StringVar(&m.addrs, "memcached-addrs", "", "with -store memcached: the servers, comma-separated `host:port` list; keys are spread over them as envoyproxy/ratelimit spreads them (the same list, in the same order, puts a key on the same server)")
	fs.StringVar(&m.srv, "memcached-srv", "", "with -store memcached: find the servers in this DNS SRV record (`_service._proto.name`) instead of -memcached-addrs")
	fs.DurationVar(&m.srvRefresh, "memcached-srv-refresh", 0, "how often -memcached-srv is looked up again; 0 looks it up once, at start")
	fs.IntVar(&m.maxIdleConns, "memcached-max-idle-conns", memcached.DefaultMaxIdleConns, "connections kept open to each memcached server between calls")
	fs.DurationVar(&m.timeout, "memcached-timeout", memcached.DefaultTimeout, "time a memcached connect, read or write may take (-store-timeout and the call's deadline bound a whole decision)")
	fs.BoolVar(&m.tls, "memcached-tls", false, "connect to memcached with TLS")
	fs.StringVar(&m.tlsCA, "memcached-tls-ca", "", "with -memcached-tls: PEM `file` of the CA of the servers' certificates (default: the system's)")
	fs.StringVar(&m.tlsCert, "memcached-tls-cert", "", "with -memcached-tls: PEM `file` of a client certificate")
	fs.StringVar(&m.tlsKey, "memcached-tls-key", "", "with -memcached-tls: PEM `file` of the client certificate's key")
	fs.BoolVar(&m.tlsSkipHostnameVerify, "memcached-tls-skip-hostname-verification", false, "with -memcached-tls: verify the servers' certificate chains but not the names they are for (not recommended)")
	fs.StringVar(&m.keyPrefix, "memcached-key-prefix", "", "start of every memcached key (envoyproxy/ratelimit's CACHE_KEY_PREFIX), so that several deployments can share memcached")
	fs.BoolVar(&m.ownKeys, "memcached-own-keys", false, "keep fixed windows in envoy-rls's own keys too, not in envoyproxy/ratelimit's counters: for configs whose nodes hold two fixed windows of the reference's units (a mixed rollout with reference replicas needs it off)")
	fs.DurationVar(&m.expirationJitter, "memcached-expiration-jitter", 0, "add up to this much, at random, to the expiration of a fixed window's counter (envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS)")
}

// check refuses memcached settings without -store memcached, and a
// memcached store without servers.
func (m *memcachedSettings) check(store storeKind) error {
	var given string // the first -memcached-* flag set
	m.fs.Visit(func(f *flag.Flag) {
		if given == "" && strings.HasPrefix(f.Name, "memcached-") {
			given = "-" + f.Name
		}
	})
	switch {
	case store != memcachedStore && given != "":
		return fmt.Errorf("%s: set for the memcached store, but -store is not memcached", given)
	case store != memcachedStore:
		return nil
	case m.addrs == "" && m.srv == "":
		return fmt.Errorf("-store memcached: give the servers with -memcached-addrs or -memcached-srv")
	case m.addrs != "" && m.srv != "":
		return fmt.Errorf("-memcached-addrs and -memcached-srv: one or the other")
	case m.srvRefresh < 0:
		return fmt.Errorf("-memcached-srv-refresh: must not be negative, got %s", m.srvRefresh)
	case m.srvRefresh > 0 && m.srv == "":
		return fmt.Errorf("-memcached-srv-refresh needs -memcached-srv")
	case m.maxIdleConns < 1:
		return fmt.Errorf("-memcached-max-idle-conns: must be at least 1, got %d", m.maxIdleConns)
	case m.timeout <= 0:
		return fmt.Errorf("-memcached-timeout: must be above 0, got %s", m.timeout)
	case m.expirationJitter < 0:
		return fmt.Errorf("-memcached-expiration-jitter: must not be negative, got %s", m.expirationJitter)
	case !m.tls && (m.tlsCA != "" || m.tlsCert != "" || m.tlsKey != "" || m.tlsSkipHostnameVerify):
		return fmt.Errorf("-memcached-tls-*: need -memcached-tls")
	case (m.tlsCert == "") != (m.tlsKey == ""):
		return fmt.Errorf("-memcached-tls-cert and -memcached-tls-key go together")
	}
	return nil
}

// openMemcached opens the memcached store; the circuit breaker takes the
// -redis-breaker-* flags, which bound every server's the same way.
func openMemcached(s *settings, log *slog.Logger) (*memcached.Store, error) {
	m := s.memcached
	st, err := memcached.New(memcached.Options{
		Addrs: splitList(m.addrs), SRV: m.srv, SRVRefresh: m.srvRefresh,
		MaxIdleConns: m.maxIdleConns, Timeout: m.timeout,
		TLS: m.tls, CAFile: m.tlsCA, CertFile: m.tlsCert, KeyFile: m.tlsKey, SkipHostnameVerification: m.tlsSkipHostnameVerify,
		Prefix: m.keyPrefix, OwnKeys: m.ownKeys, ExpirationJitter: m.expirationJitter,
		BreakerTrip: s.breakerTrip, BreakerCool: s.breakerCool, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("-store memcached: %w", err)
	}
	return st, nil
}

// openMemcachedStore opens the memcached store and, with -failure-mode
// local, the fallback store in front of it. It returns no Redis store:
// RLQS then divides among this replica's streams, as on memory.
func openMemcachedStore(s *settings, memOpts memory.Options, m *metrics.Metrics, log *slog.Logger) (store, *redis.Store, error) {
	st, err := openMemcached(s, log)
	if err != nil {
		return nil, nil, err
	}
	m.WatchBreakers(func() int { return len(st.BreakersOpen()) })
	if s.failureMode.value != failLocal {
		return st, nil, nil
	}
	memOpts.MaxBytes -= cacheBytes(s) // the over-limit cache's share
	fb := fallback.New(st, fallback.Options{Local: memOpts, Timeout: s.storeTimeout, OnSwitch: m.StoreSwitch, Logger: log})
	m.WatchBuckets(fb.Len, fb.Bytes, nil)
	return fb, nil, nil
}

// memcache reads envoyproxy/ratelimit's memcached settings
// (BACKEND_TYPE=memcache) as -memcached-* flags; a malformed value is an
// error naming its variable.
func (r *envoyReader) memcache() {
	hosts, srv := r.get("MEMCACHE_HOST_PORT", ""), r.get("MEMCACHE_SRV", "")
	switch {
	case hosts != "" && srv != "":
		r.fail("MEMCACHE_SRV", "MEMCACHE_HOST_PORT is set too: one or the other, as in envoyproxy/ratelimit")
	case srv != "":
		if !memcached.ValidSRV(srv) {
			r.fail("MEMCACHE_SRV", "%q: want _service._proto.name", srv)
		}
		r.set("memcached-srv", srv)
		if v := r.get("MEMCACHE_SRV_REFRESH", ""); v != "" {
			if d, err := time.ParseDuration(v); err != nil || d < 0 {
				r.fail("MEMCACHE_SRV_REFRESH", "%q: want a duration such as 30s, 0 to look the SRV record up once", v)
			} else {
				r.set("memcached-srv-refresh", v)
			}
		}
	case hosts != "":
		for _, h := range strings.Split(hosts, ",") {
			if _, port, err := net.SplitHostPort(strings.TrimSpace(h)); err != nil || port == "" {
				r.fail("MEMCACHE_HOST_PORT", "%q: want host:port, comma-separated", h)
			}
		}
		r.set("memcached-addrs", hosts)
	default:
		r.fail("MEMCACHE_HOST_PORT", "BACKEND_TYPE=memcache needs the servers: MEMCACHE_HOST_PORT or MEMCACHE_SRV")
	}
	if v := r.get("MEMCACHE_MAX_IDLE_CONNS", ""); v != "" {
		switch n, err := strconv.Atoi(v); {
		case err != nil:
			r.fail("MEMCACHE_MAX_IDLE_CONNS", "%q: want a whole number", v)
		case n < 1:
			r.set("memcached-max-idle-conns", "2") // the reference's client reads less than 1 as its default, 2
		default:
			r.set("memcached-max-idle-conns", v)
		}
	}
	if r.on("MEMCACHE_TLS", false) {
		r.set("memcached-tls", "true")
		r.copy("MEMCACHE_TLS_CACERT", "memcached-tls-ca")
		r.copy("MEMCACHE_TLS_CLIENT_CERT", "memcached-tls-cert")
		r.copy("MEMCACHE_TLS_CLIENT_KEY", "memcached-tls-key")
		if r.on("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
			r.set("memcached-tls-skip-hostname-verification", "true")
		}
	} else if r.given("MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION") {
		r.warn("MEMCACHE_TLS_CACERT", "not read without MEMCACHE_TLS=true, as in envoyproxy/ratelimit: memcached is reached without TLS")
	}
	jitter := r.get("EXPIRATION_JITTER_MAX_SECONDS", "300")
	if n, err := strconv.ParseInt(jitter, 10, 64); err != nil || n < 0 {
		r.fail("EXPIRATION_JITTER_MAX_SECONDS", "%q: want a whole number of seconds, 0 or more", jitter)
	} else {
		r.set("memcached-expiration-jitter", jitter+"s")
	}
	if p := r.get("CACHE_KEY_PREFIX", ""); p != "" {
		if !memcached.ValidPrefix(p) {
			r.fail("CACHE_KEY_PREFIX", "%q: memcached keys take at most 128 bytes of prefix, without spaces or control characters", p)
		}
		r.set("memcached-key-prefix", p)
	}
}

// checkConfig adds to o, for the memcached store in the reference's keys,
// the check that no node holds two fixed windows those keys cannot tell
// apart (-memcached-own-keys counts them apart).
func (m *memcachedSettings) checkConfig(store storeKind, o descriptors.Options) descriptors.Options {
	if store == memcachedStore && !m.ownKeys {
		o.Check = (*descriptors.Config).ReferenceWindowClashes
	}
	return o
}
