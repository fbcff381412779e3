package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// regionSettings are the -region* flags: one limit across regions, each
// deciding on its own Redis.
type regionSettings struct {
	name          string
	peers         string
	passwordFiles string
	interval      time.Duration
	silence       time.Duration
	parsed        []regionPeer // by check
}

// regionPeer is another region: its name, its Redis's URL (a Cluster seed
// list when it has addr= parameters), and the file holding its password,
// if -region-peer-password-files names one.
type regionPeer struct {
	name, url string
	cluster   bool
	password  string // a file
}

func newRegionFlags(fs *flag.FlagSet) *regionSettings {
	r := &regionSettings{}
	fs.StringVar(&r.name, "region", "", "this replica's region (lower-case letters, digits, '-'): every limit is one limit across the regions, each deciding on its own Redis (needs -store redis); empty: no regions")
	fs.StringVar(&r.peers, "region-peers", "", "every other region and its Redis, `NAME=URL,...` (URLs as -redis-url takes them; with addr= parameters, a Cluster's seed list), where the regions exchange their demand and usage")
	fs.StringVar(&r.passwordFiles, "region-peer-password-files", "", "the password of a peer region's Redis from a file (a mounted Secret), `NAME=FILE,...`, used instead of its URL's (so that a password needs no URL escaping and stays off the command line); a trailing newline is dropped")
	fs.DurationVar(&r.interval, "region-interval", time.Second, "how often regions exchange; a link slower than half of it one way leaves the others' reports late")
	fs.DurationVar(&r.silence, "region-silence", time.Minute, "how long a region may be silent (its reports not reaching this one) before its part of each limit is given back to the others")
	return r
}

// regionName is what a region may be called.
var regionName = regexp.MustCompile(`^[a-z0-9-]+$`)

// check parses the peers, and reports what is wrong with the settings for
// a store of kind st.
func (r *regionSettings) check(st storeKind) error {
	switch {
	case r.name == "" && r.peers != "":
		return fmt.Errorf("-region-peers needs -region: this replica's own region")
	case r.name == "" && r.passwordFiles != "":
		return fmt.Errorf("-region-peer-password-files needs -region and -region-peers")
	case r.name == "":
		return nil
	case !regionName.MatchString(r.name):
		return fmt.Errorf("-region %q: a region's name is lower-case letters, digits and '-'", r.name)
	case st != redisStore:
		return fmt.Errorf("-region needs -store redis: regions decide on each region's Redis and exchange through them")
	case r.interval <= 0:
		return fmt.Errorf("-region-interval: must be above 0, got %s", r.interval)
	case r.silence < r.interval:
		return fmt.Errorf("-region-silence (%s) must be at least -region-interval (%s)", r.silence, r.interval)
	}
	r.parsed = nil
	seen := map[string]bool{r.name: true}
	for i, item := range splitList(r.peers) {
		name, raw, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || raw == "" || strings.Contains(name, "/") {
			// Not echoed: it may hold a password.
			return fmt.Errorf("-region-peers: item %d is not NAME=URL", i+1)
		}
		if !regionName.MatchString(name) {
			return fmt.Errorf("-region-peers: %q: a region's name is lower-case letters, digits and '-'", name)
		}
		if seen[name] {
			if name == r.name {
				return fmt.Errorf("-region-peers: %q is this replica's own region (-region)", name)
			}
			return fmt.Errorf("-region-peers: region %q twice", name)
		}
		seen[name] = true
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			return fmt.Errorf("-region-peers: region %q: want a redis:// or rediss:// URL", name)
		}
		r.parsed = append(r.parsed, regionPeer{name: name, url: raw, cluster: u.Query().Has("addr")})
	}
	return r.checkPasswordFiles()
}

// checkPasswordFiles gives each peer -region-peer-password-files names its
// file; each must be a peer of -region-peers, once.
func (r *regionSettings) checkPasswordFiles() error {
	for i, item := range splitList(r.passwordFiles) {
		name, file, ok := strings.Cut(item, "=")
		name, file = strings.TrimSpace(name), strings.TrimSpace(file)
		if !ok || name == "" || file == "" {
			return fmt.Errorf("-region-peer-password-files: item %d is not NAME=FILE", i+1)
		}
		p := slices.IndexFunc(r.parsed, func(p regionPeer) bool { return p.name == name })
		switch {
		case name == r.name:
			return fmt.Errorf("-region-peer-password-files: %q is this replica's own region: its Redis's password is -redis-password-file's", name)
		case p < 0:
			return fmt.Errorf("-region-peer-password-files: %q is not a region of -region-peers", name)
		case r.parsed[p].password != "":
			return fmt.Errorf("-region-peer-password-files: region %q twice", name)
		}
		r.parsed[p].password = file
	}
	return nil
}

// peerStore opens the store of peer p's Redis, its password read from its
// file if it has one. A rediss:// peer is verified with this region's
// -redis-tls-ca and shown its -redis-tls-cert (one organisation's regions
// share a CA), or the system's roots without them; the dial, read and
// write timeouts are this region's.
func peerStore(s *settings, p regionPeer, log *slog.Logger) (*redis.Store, error) {
	password, err := readSecret(p.password)
	if err != nil {
		return nil, fmt.Errorf("-region-peer-password-files: region %q: %w", p.name, err)
	}
	own := s.redis
	c := &redis.ClientOptions{URL: p.url, Password: password, Cluster: p.cluster,
		DialTimeout: own.dialTimeout, ReadTimeout: own.readTimeout, WriteTimeout: own.writeTimeout}
	if u, err := url.Parse(p.url); err == nil && u.Scheme == "rediss" {
		c.CAFile, c.CertFile, c.KeyFile = own.tlsCA, own.tlsCert, own.tlsKey
	}
	st, err := redis.New(redis.Options{Connect: c, Logger: log, Prefix: s.redisKeyPrefix})
	if err != nil {
		return nil, fmt.Errorf("-region-peers: region %q: %w", p.name, err)
	}
	return st, nil
}

// openRegions opens the exchange of this replica's region: its own Redis
// (own) and a store of each peer's, for the reports only. close closes
// the peers' stores.
func openRegions(s *settings, own *redis.Store, m *metrics.Metrics, log *slog.Logger) (x *region.Exchange, closeAll func(), err error) {
	peers := map[string]region.Board{}
	var opened []*redis.Store
	closeAll = func() {
		for _, p := range opened {
			p.Close()
		}
	}
	names := []string{s.region.name}
	for _, p := range s.region.parsed {
		st, err := peerStore(s, p, log)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		opened = append(opened, st)
		peers[p.name] = region.RedisBoard(st)
		names = append(names, p.name)
	}
	x, err = region.New(region.Options{Region: s.region.name, Regions: names, Own: region.RedisBoard(own), Peers: peers,
		Interval: s.region.interval, Silence: s.region.silence, Logger: log, Observer: m.Regions(names)})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	m.WatchRegions(x.Statuses)
	return x, closeAll, nil
}

// demands tells every demand a request's buckets.
type demands []interface{ Asked([]limit.Bucket) }

func (d demands) Asked(buckets []limit.Bucket) {
	for _, x := range d {
		x.Asked(buckets)
	}
}
