package redis

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/certs"
)

// ClientOptions say how to reach Redis.
type ClientOptions struct {
	// URL is a go-redis URL: redis://[user:password@]host:port/db,
	// rediss:// for TLS, or unix:///path/to/redis.sock?db=0. For a Cluster, more nodes are given as addr=
	// parameters; for Sentinel, it gives the master's credentials, database
	// and TLS, and its host is not used.
	URL string
	// Password, when set, replaces the URL's password (for every node), so
	// that it can come from a file rather than a command line.
	Password string
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

// NewClient returns a client for o. It does not connect: the first command
// does. Single, Sentinel and Cluster clients get the same settings (see
// apply): no retried dials or commands. (In a Cluster, go-redis still
// follows MOVED and ASK redirects.)
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
		if err := o.apply(settings{&opts.TLSConfig, &opts.Password, &opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries,
			&opts.PoolSize, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout}); err != nil {
			return nil, err
		}
		return goredis.NewClusterClient(opts), nil
	case o.SentinelMaster != "":
		p, err := goredis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis URL %s: %w", u.Redacted(), err)
		}
		opts := &goredis.FailoverOptions{
			MasterName:       o.SentinelMaster,
			SentinelAddrs:    o.SentinelAddrs,
			SentinelPassword: o.SentinelPassword,
			Username:         p.Username,
			Password:         p.Password,
			DB:               p.DB,
			TLSConfig:        p.TLSConfig,
			ClientName:       p.ClientName,
			PoolSize:         p.PoolSize,
			DialTimeout:      p.DialTimeout,
			ReadTimeout:      p.ReadTimeout,
			WriteTimeout:     p.WriteTimeout,
		}
		if err := o.apply(settings{&opts.TLSConfig, &opts.Password, &opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries,
			&opts.PoolSize, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout}); err != nil {
			return nil, err
		}
		return goredis.NewFailoverClient(opts), nil
	default:
		opts, err := goredis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis URL %s: %w", u.Redacted(), err)
		}
		if err := o.apply(settings{&opts.TLSConfig, &opts.Password, &opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries,
			&opts.PoolSize, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout}); err != nil {
			return nil, err
		}
		return goredis.NewClient(opts), nil
	}
}

// settings point at the fields of one kind of go-redis options (single,
// Sentinel or Cluster) that every client of the store sets alike.
type settings struct {
	tls                                    **tls.Config
	password                               *string
	contextTimeout                         *bool
	maxRetries, dialerRetries, poolSize    *int
	dialTimeout, readTimeout, writeTimeout *time.Duration
}

// apply sets what the store needs of every client, over the URL's values:
// the call's deadline bounds each command; a failed dial is not retried, so
// that a call fails fast while Redis is down; and no command is sent twice
// (-1), whatever the URL's max_retries, since a script whose reply was lost
// may have charged (scripts are also marked noRetry). The TLS files, sizes
// and timeouts of o replace the URL's where given.
func (o ClientOptions) apply(s settings) error {
	tc, err := tlsConfig(*s.tls, o)
	if err != nil {
		return err
	}
	*s.tls = tc
	*s.password = cmp.Or(o.Password, *s.password)
	*s.contextTimeout = true
	*s.maxRetries = -1
	*s.dialerRetries = 1
	*s.poolSize = cmp.Or(o.PoolSize, *s.poolSize)
	*s.dialTimeout = cmp.Or(o.DialTimeout, *s.dialTimeout)
	*s.readTimeout = cmp.Or(o.ReadTimeout, *s.readTimeout)
	*s.writeTimeout = cmp.Or(o.WriteTimeout, *s.writeTimeout)
	return nil
}

// tlsConfig adds the CA and client certificate files to the TLS settings of
// a rediss:// URL (nil for redis://).
func tlsConfig(base *tls.Config, o ClientOptions) (*tls.Config, error) {
	if base == nil {
		return nil, nil
	}
	c, err := certs.Client(base, o.CAFile, o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("redis TLS %w", err)
	}
	return c, nil
}
