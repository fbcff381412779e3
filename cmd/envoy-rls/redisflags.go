package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// redisFlags are the flags that reach one Redis server: -redis-* for the
// store's Redis, -redis-persecond-* for the per-second one.
type redisFlags struct {
	prefix                                 string // "-redis-" or "-redis-persecond-"
	url, passwordFile                      string
	cluster                                bool
	sentinelMaster, sentinelAddrs          string
	sentinelPassword                       string
	tlsCA, tlsCert, tlsKey                 string
	poolSize                               int
	dialTimeout, readTimeout, writeTimeout time.Duration
	pipelineLimit                          int
	pipelineWindow                         time.Duration
}

// register defines the flags named name (after "-"), the server called
// what in their help ("Redis", "the per-second Redis"), its URL's default
// and help given.
func (f *redisFlags) register(fs *flag.FlagSet, name, what, urlDefault, urlHelp string) {
	f.prefix = "-" + name + "-"
	n := func(s string) string { return name + "-" + s }
	fs.StringVar(&f.url, n("url"), urlDefault, urlHelp)
	fs.StringVar(&f.passwordFile, n("password-file"), "", "`file` holding the password of "+what+" (a mounted Secret), used instead of the URL's; a trailing newline is dropped")
	fs.BoolVar(&f.cluster, n("cluster"), false, "treat -"+n("url")+" (with extra addr= parameters) as a Redis Cluster seed list")
	fs.StringVar(&f.sentinelMaster, n("sentinel-master"), "", "reach "+what+" through Sentinel: the master's `name`")
	fs.StringVar(&f.sentinelAddrs, n("sentinel-addrs"), "", "the sentinels of "+what+", as comma-separated `host:port` list")
	fs.StringVar(&f.sentinelPassword, n("sentinel-password"), "", "password of the sentinels of "+what+", if they need one")
	fs.StringVar(&f.tlsCA, n("tls-ca"), "", "PEM `file` of the CA that signs the certificate of "+what+" (rediss://)")
	fs.StringVar(&f.tlsCert, n("tls-cert"), "", "PEM `file` of a client certificate for "+what+" (mutual TLS)")
	fs.StringVar(&f.tlsKey, n("tls-key"), "", "PEM `file` of that client certificate's key")
	fs.IntVar(&f.poolSize, n("pool-size"), 0, "connections per node of "+what+"; 0 for the URL's pool_size, or 10 per CPU")
	fs.DurationVar(&f.dialTimeout, n("dial-timeout"), 0, "time to open a connection to "+what+"; 0 for the URL's dial_timeout, or 5s")
	fs.DurationVar(&f.readTimeout, n("read-timeout"), 0, "time to wait for a reply of "+what+" (a call's own deadline applies too); 0 for the URL's read_timeout, or 3s")
	fs.DurationVar(&f.writeTimeout, n("write-timeout"), 0, "time to send a command to "+what+"; 0 for the URL's write_timeout, or the read timeout")
	fs.IntVar(&f.pipelineLimit, n("pipeline-limit"), redis.DefaultPipeline.Limit, "most script calls batched into one pipeline to "+what+"; 0 sends each call on its own")
	fs.DurationVar(&f.pipelineWindow, n("pipeline-window"), redis.DefaultPipeline.Window, "how long a pipeline to "+what+" waits for more calls; 0 sends at once what is queued (calls that arrive meanwhile go in the next one)")
}

// check reports the first flag out of range.
func (f *redisFlags) check() error {
	switch {
	case f.poolSize < 0:
		return fmt.Errorf("%spool-size: must be 0 or more, got %d", f.prefix, f.poolSize)
	case f.pipelineLimit < 0:
		return fmt.Errorf("%spipeline-limit: must be 0 or more, got %d", f.prefix, f.pipelineLimit)
	case f.pipelineWindow < 0:
		return fmt.Errorf("%spipeline-window: must not be negative, got %v", f.prefix, f.pipelineWindow)
	case f.dialTimeout < 0 || f.readTimeout < 0 || f.writeTimeout < 0:
		return fmt.Errorf("%sdial-timeout, %sread-timeout and %swrite-timeout must not be negative", f.prefix, f.prefix, f.prefix)
	}
	return nil
}

// server returns how to reach the server, its password read from its file.
func (f *redisFlags) server() (*redis.Server, error) {
	password, err := readSecret(f.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("%spassword-file: %w", f.prefix, err)
	}
	return &redis.Server{
		Pipeline: redis.Pipeline{Limit: f.pipelineLimit, Window: f.pipelineWindow},
		Connect: &redis.ClientOptions{
			URL:              f.url,
			Password:         password,
			Cluster:          f.cluster,
			SentinelMaster:   f.sentinelMaster,
			SentinelAddrs:    splitList(f.sentinelAddrs),
			SentinelPassword: f.sentinelPassword,
			CAFile:           f.tlsCA,
			CertFile:         f.tlsCert,
			KeyFile:          f.tlsKey,
			PoolSize:         f.poolSize,
			DialTimeout:      f.dialTimeout,
			ReadTimeout:      f.readTimeout,
			WriteTimeout:     f.writeTimeout,
		},
	}, nil
}
