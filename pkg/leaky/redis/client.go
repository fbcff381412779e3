package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ClientOptions say how to reach Redis.
type ClientOptions struct {
	// URL is a go-redis URL: redis://[user:password@]host:port/db,
	// rediss:// for TLS, or unix:///path/to/redis.sock?db=0. For a Cluster, more nodes are given as addr=
	// parameters; for Sentinel, it gives the master's credentials, database
	// and TLS, and its host is not used.
	URL string
	// Cluster treats URL as a Redis Cluster seed list.
	Cluster bool
	// SentinelMaster, when set, reaches the master of that name through the
	// sentinels at SentinelAddrs (host:port).
	SentinelMaster   string
	SentinelAddrs    []string
	SentinelPassword string
	// CAFile verifies the server's certificate (PEM); CertFile and KeyFile
	// are a client certificate for mutual TLS. They need a rediss:// URL.
	CAFile, CertFile, KeyFile string
	// PoolSize is the number of connections per node; 0 for the URL's
	// pool_size or go-redis's default (10 per CPU).
	PoolSize int
	// DialTimeout, ReadTimeout and WriteTimeout bound each connection,
	// read and write; 0 for the URL's dial_timeout, read_timeout and
	// write_timeout, or go-redis's defaults (5s, 3s, 3s). A call's own
	// deadline always applies too.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
}

// or returns v, or else fallback when v is zero.
func or[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}

// NewClient returns a client for o. It does not connect: the first command
// does. A failed dial is not retried, so that a call fails fast while Redis
// is down. (Scripts are never retried either, see runScript; in a Cluster,
// go-redis still follows MOVED and ASK redirects.)
func NewClient(o ClientOptions) (goredis.UniversalClient, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, errors.New("redis URL: cannot parse it") // the error would print the password
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		return nil, fmt.Errorf("redis URL %s: the scheme must be redis://, rediss:// (TLS) or unix:// (a socket)", u.Redacted())
	}
	if u.Scheme == "unix" && (o.Cluster || o.SentinelMaster != "") {
		return nil, fmt.Errorf("redis URL %s: a unix socket reaches one server, not a Cluster or Sentinel", u.Redacted())
	}
	tlsFiles := o.CAFile != "" || o.CertFile != "" || o.KeyFile != ""
	if tlsFiles && u.Scheme != "rediss" {
		return nil, fmt.Errorf("redis URL %s: TLS certificate files need a rediss:// URL", u.Redacted())
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("redis TLS: a client certificate needs both the certificate and the key file")
	}
	if o.Cluster && o.SentinelMaster != "" {
		return nil, errors.New("redis: choose Cluster or Sentinel, not both")
	}
	if o.SentinelMaster != "" && len(o.SentinelAddrs) == 0 {
		return nil, errors.New("redis Sentinel: the sentinels' addresses are required with a master name")
	}

	switch {
	case o.Cluster:
		opts, err := goredis.ParseClusterURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis Cluster URL %s: %w", u.Redacted(), err)
		}
		if opts.TLSConfig, err = tlsConfig(opts.TLSConfig, o); err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled = true
		opts.DialerRetries = 1
		opts.PoolSize = or(o.PoolSize, opts.PoolSize)
		opts.DialTimeout = or(o.DialTimeout, opts.DialTimeout)
		opts.ReadTimeout = or(o.ReadTimeout, opts.ReadTimeout)
		opts.WriteTimeout = or(o.WriteTimeout, opts.WriteTimeout)
		return goredis.NewClusterClient(opts), nil
	case o.SentinelMaster != "":
		opts, err := goredis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis URL %s: %w", u.Redacted(), err)
		}
		tc, err := tlsConfig(opts.TLSConfig, o)
		if err != nil {
			return nil, err
		}
		return goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:            o.SentinelMaster,
			SentinelAddrs:         o.SentinelAddrs,
			SentinelPassword:      o.SentinelPassword,
			Username:              opts.Username,
			Password:              opts.Password,
			DB:                    opts.DB,
			TLSConfig:             tc,
			ClientName:            opts.ClientName,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialerRetries:         1,
			PoolSize:              or(o.PoolSize, opts.PoolSize),
			DialTimeout:           or(o.DialTimeout, opts.DialTimeout),
			ReadTimeout:           or(o.ReadTimeout, opts.ReadTimeout),
			WriteTimeout:          or(o.WriteTimeout, opts.WriteTimeout),
		}), nil
	default:
		opts, err := goredis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis URL %s: %w", u.Redacted(), err)
		}
		if opts.TLSConfig, err = tlsConfig(opts.TLSConfig, o); err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = -1
		opts.DialerRetries = 1
		opts.PoolSize = or(o.PoolSize, opts.PoolSize)
		opts.DialTimeout = or(o.DialTimeout, opts.DialTimeout)
		opts.ReadTimeout = or(o.ReadTimeout, opts.ReadTimeout)
		opts.WriteTimeout = or(o.WriteTimeout, opts.WriteTimeout)
		return goredis.NewClient(opts), nil
	}
}

// tlsConfig adds the CA and client certificate files to the TLS settings of
// a rediss:// URL (nil for redis://).
func tlsConfig(base *tls.Config, o ClientOptions) (*tls.Config, error) {
	if base == nil {
		return nil, nil
	}
	c := base.Clone()
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA %s: no PEM certificate in it", o.CAFile)
		}
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
