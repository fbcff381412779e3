package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// perSecondSettings are the -redis-persecond-* flags: a second Redis for
// the buckets of limits counted per second (envoyproxy/ratelimit's
// REDIS_PERSECOND), set as the first Redis's flags set the first.
type perSecondSettings struct {
	url                                    string
	passwordFile                           string
	cluster                                bool
	sentinelMaster                         string
	sentinelAddrs                          string
	sentinelPassword                       string
	tlsCA, tlsCert, tlsKey                 string
	poolSize                               int
	dialTimeout, readTimeout, writeTimeout time.Duration
	pipelineLimit                          int
	pipelineWindow                         time.Duration
	given                                  []string // the flags set, but -redis-persecond-url
}

func (p *perSecondSettings) register(fs *flag.FlagSet) {
	fs.StringVar(&p.url, "redis-persecond-url", "", "a second Redis `URL` for the limits counted per second (unit: second), as envoyproxy/ratelimit's REDIS_PERSECOND: their buckets live there, the others on -redis-url, and a request is all or nothing across both; empty: one Redis holds every bucket")
	fs.StringVar(&p.passwordFile, "redis-persecond-password-file", "", "`file` holding the per-second Redis's password, used instead of the URL's")
	fs.BoolVar(&p.cluster, "redis-persecond-cluster", false, "treat -redis-persecond-url (with extra addr= parameters) as a Redis Cluster seed list")
	fs.StringVar(&p.sentinelMaster, "redis-persecond-sentinel-master", "", "reach the per-second Redis through Sentinel: the master's `name`")
	fs.StringVar(&p.sentinelAddrs, "redis-persecond-sentinel-addrs", "", "the per-second Redis's sentinels, as comma-separated `host:port` list")
	fs.StringVar(&p.sentinelPassword, "redis-persecond-sentinel-password", "", "password of the per-second Redis's sentinels, if they need one")
	fs.StringVar(&p.tlsCA, "redis-persecond-tls-ca", "", "PEM `file` of the CA that signs the per-second Redis's certificate (rediss://)")
	fs.StringVar(&p.tlsCert, "redis-persecond-tls-cert", "", "PEM `file` of a client certificate for the per-second Redis")
	fs.StringVar(&p.tlsKey, "redis-persecond-tls-key", "", "PEM `file` of that client certificate's key")
	fs.IntVar(&p.poolSize, "redis-persecond-pool-size", 0, "connections per per-second Redis node; 0 for the URL's pool_size, or 10 per CPU")
	fs.DurationVar(&p.dialTimeout, "redis-persecond-dial-timeout", 0, "time to open a connection to the per-second Redis; 0 for the URL's dial_timeout, or 5s")
	fs.DurationVar(&p.readTimeout, "redis-persecond-read-timeout", 0, "time to wait for a reply of the per-second Redis; 0 for the URL's read_timeout, or 3s")
	fs.DurationVar(&p.writeTimeout, "redis-persecond-write-timeout", 0, "time to send a command to the per-second Redis; 0 for the URL's write_timeout, or the read timeout")
	fs.IntVar(&p.pipelineLimit, "redis-persecond-pipeline-limit", redis.DefaultPipeline.Limit, "most script calls batched into one pipeline to the per-second Redis; 0 sends each call on its own")
	fs.DurationVar(&p.pipelineWindow, "redis-persecond-pipeline-window", redis.DefaultPipeline.Window, "how long a pipeline to the per-second Redis waits for more calls; 0 sends at once")
}

// noteGiven records which -redis-persecond-* flags fs was given.
func (p *perSecondSettings) noteGiven(fs *flag.FlagSet) {
	p.given = nil
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "redis-persecond-url" && strings.HasPrefix(f.Name, "redis-persecond-") {
			p.given = append(p.given, "-"+f.Name)
		}
	})
}

// check checks the flags; store is -store's.
func (p *perSecondSettings) check(store storeKind) error {
	switch {
	case p.url == "" && len(p.given) > 0:
		return fmt.Errorf("%s: needs -redis-persecond-url", p.given[0])
	case p.url == "":
		return nil
	case store != redisStore:
		return fmt.Errorf("-redis-persecond-url: a second Redis for per-second limits needs -store redis")
	case p.poolSize < 0:
		return fmt.Errorf("-redis-persecond-pool-size: must be 0 or more, got %d", p.poolSize)
	case p.pipelineLimit < 0:
		return fmt.Errorf("-redis-persecond-pipeline-limit: must be 0 or more, got %d", p.pipelineLimit)
	case p.pipelineWindow < 0:
		return fmt.Errorf("-redis-persecond-pipeline-window: must not be negative, got %v", p.pipelineWindow)
	case p.dialTimeout < 0 || p.readTimeout < 0 || p.writeTimeout < 0:
		return fmt.Errorf("-redis-persecond-dial-timeout, -redis-persecond-read-timeout and -redis-persecond-write-timeout must not be negative")
	}
	return nil
}

// server returns the per-second Redis of the store, or nil without one.
func (p *perSecondSettings) server() (*redis.Server, error) {
	if p.url == "" {
		return nil, nil
	}
	password, err := readSecret(p.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("-redis-persecond-password-file: %w", err)
	}
	return &redis.Server{
		Pipeline: redis.Pipeline{Limit: p.pipelineLimit, Window: p.pipelineWindow},
		Connect: &redis.ClientOptions{
			URL:              p.url,
			Password:         password,
			Cluster:          p.cluster,
			SentinelMaster:   p.sentinelMaster,
			SentinelAddrs:    splitList(p.sentinelAddrs),
			SentinelPassword: p.sentinelPassword,
			CAFile:           p.tlsCA,
			CertFile:         p.tlsCert,
			KeyFile:          p.tlsKey,
			PoolSize:         p.poolSize,
			DialTimeout:      p.dialTimeout,
			ReadTimeout:      p.readTimeout,
			WriteTimeout:     p.writeTimeout,
		},
	}, nil
}
