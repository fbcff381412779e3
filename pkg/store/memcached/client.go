package memcached

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/envoy-rls/envoy-rls/pkg/certs"
)

// Options configure a Store.
type Options struct {
	// Addrs are the memcached servers, host:port each; keys are spread
	// over them as the reference spreads them (the same list in the same
	// order puts a key on the same server). Exactly one of Addrs and SRV.
	Addrs []string
	// SRV is a DNS SRV name, _service._proto.name, whose targets are the
	// servers (sorted by host:port, as the reference sorts them).
	SRV string
	// SRVRefresh is how often SRV is looked up again; 0 looks it up once.
	SRVRefresh time.Duration
	// LookupSRV resolves SRV; nil uses the system's resolver.
	LookupSRV func(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)

	// MaxIdleConns is the connections kept open per server between calls;
	// 0 means DefaultMaxIdleConns.
	MaxIdleConns int
	// Timeout bounds each network operation (connect, read, write) of one
	// memcached command; 0 means DefaultTimeout. A call's own deadline
	// applies too.
	Timeout time.Duration

	// TLS connects with TLS; CAFile verifies the servers' certificates
	// (the system's roots if empty), CertFile and KeyFile are a client
	// certificate. SkipHostnameVerification still verifies the chain, but
	// not the name it is for, as the reference does.
	TLS                       bool
	CAFile, CertFile, KeyFile string
	SkipHostnameVerification  bool

	// Prefix starts every key (the reference's CACHE_KEY_PREFIX): at most
	// 128 bytes, no space or control byte.
	Prefix string
	// OwnKeys keeps every bucket in the store's own layout, fixed windows
	// too: for configs where one node has two fixed windows of reference
	// units (which would share the reference's key at the instants their
	// windows start together). A mixed rollout with reference replicas
	// needs it off (the default).
	OwnKeys bool
	// ExpirationJitter adds up to this much, at random, to the expiration
	// of a reference counter (the reference's
	// EXPIRATION_JITTER_MAX_SECONDS), so that keys written together do
	// not all expire together.
	ExpirationJitter time.Duration

	// BreakerTrip is the number of calls in a row that time out on a server
	// after which its calls fail at once for BreakerCool (package
	// breaker); 0 turns the breaker off.
	BreakerTrip int
	BreakerCool time.Duration

	// Clock is the wall clock, for expirations past 30 days (memcached
	// takes them as Unix times); nil means time.Now. Decisions are made at
	// the instant Apply is given.
	Clock func() time.Time
	// Logger receives SRV refresh failures; nil means slog.Default().
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultMaxIdleConns = 64
	DefaultTimeout      = 500 * time.Millisecond
)

// servers picks the server of a key as the reference does (memcache's
// ServerList: a CRC-32 of the key), and a lock's server as its bucket's:
// a request of one bucket reads both in one command.
type servers struct{ list *memcache.ServerList }

func (s servers) PickServer(key string) (net.Addr, error) {
	return s.list.PickServer(strings.TrimSuffix(key, lockSuffix))
}

func (s servers) Each(f func(net.Addr) error) error { return s.list.Each(f) }

// srvName is _service._proto.name.
var srvName = regexp.MustCompile(`^_(.+?)\._(.+?)\.(.+)$`)

// ValidSRV reports whether name is an SRV name as Options.SRV takes one.
func ValidSRV(name string) bool { return srvName.MatchString(name) }

// ValidPrefix reports whether p can start every key: at most 128 bytes,
// no space or control byte.
func ValidPrefix(p string) bool { return len(p) <= maxPrefixBytes && (p == "" || fits(p)) }

// check reports the first option out of range.
func (o *Options) check() error {
	switch {
	case len(o.Addrs) > 0 && o.SRV != "":
		return errors.New("memcached: both servers and an SRV name given: one or the other")
	case len(o.Addrs) == 0 && o.SRV == "":
		return errors.New("memcached: no servers: give their host:port or an SRV name")
	case o.SRV != "" && !srvName.MatchString(o.SRV):
		return fmt.Errorf("memcached: SRV name %q: want _service._proto.name", o.SRV)
	case o.SRVRefresh < 0:
		return fmt.Errorf("memcached: SRV refresh %s: must not be negative", o.SRVRefresh)
	case o.MaxIdleConns < 0:
		return fmt.Errorf("memcached: idle connections %d: must not be negative", o.MaxIdleConns)
	case o.Timeout < 0:
		return fmt.Errorf("memcached: timeout %s: must not be negative", o.Timeout)
	case o.ExpirationJitter < 0:
		return fmt.Errorf("memcached: expiration jitter %s: must not be negative", o.ExpirationJitter)
	case !ValidPrefix(o.Prefix):
		return fmt.Errorf("memcached: key prefix %q: at most %d bytes, no space or control byte", o.Prefix, maxPrefixBytes)
	case !o.TLS && (o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.SkipHostnameVerification):
		return errors.New("memcached: TLS files or hostname verification given without TLS")
	case (o.CertFile == "") != (o.KeyFile == ""):
		return errors.New("memcached: a client certificate and its key go together")
	case o.BreakerTrip < 0:
		return fmt.Errorf("memcached: breaker trip %d: must not be negative", o.BreakerTrip)
	case o.BreakerTrip > 0 && o.BreakerCool <= 0:
		return fmt.Errorf("memcached: breaker cool %s: must be above 0", o.BreakerCool)
	}
	for _, a := range o.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("memcached: server %q: want host:port", a)
		}
	}
	return nil
}

// lookup returns the servers SRV names, sorted.
func (o *Options) lookup(ctx context.Context) ([]string, error) {
	m := srvName.FindStringSubmatch(o.SRV)
	_, records, err := o.LookupSRV(ctx, m[1], m[2], m[3])
	if err != nil {
		return nil, fmt.Errorf("memcached: looking up SRV %s: %w", o.SRV, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("memcached: SRV %s names no server", o.SRV)
	}
	addrs := make([]string, len(records))
	for i, r := range records {
		addrs[i] = net.JoinHostPort(r.Target, strconv.Itoa(int(r.Port)))
	}
	sort.Strings(addrs)
	return addrs, nil
}

// tlsConfig is the client's TLS, as the reference makes it from the same
// files.
func (o *Options) tlsConfig() (*tls.Config, error) {
	c, err := certs.Client(&tls.Config{MinVersion: tls.VersionTLS12}, o.CAFile, o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("memcached TLS: %w", err)
	}
	if o.SkipHostnameVerification {
		roots := c.RootCAs
		c.InsecureSkipVerify = true // the chain is verified below, the name not
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("memcached TLS: the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, cert := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(cert)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}

// refreshSRV looks SRV up again every interval until stop is closed,
// keeping the servers it had when a lookup fails.
func (s *Store) refreshSRV(o Options, stop <-chan struct{}) {
	defer close(s.refreshDone)
	t := time.NewTicker(o.SRVRefresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.SRVRefresh)
		addrs, err := o.lookup(ctx)
		cancel()
		if err == nil {
			err = s.servers.list.SetServers(addrs...)
		}
		if err == nil {
			s.resolved.Store(true)
		}
		if err != nil {
			s.log.Warn("memcached: keeping the servers found before", "srv", o.SRV, "err", err)
		}
	}
}
