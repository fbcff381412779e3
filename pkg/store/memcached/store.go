package memcached

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Store keeps buckets on memcached. It is safe for concurrent use.
type Store struct {
	client   *memcache.Client
	servers  servers
	prefix   string
	ownKeys  bool
	jitter   time.Duration
	clock    func() time.Time
	breakers *breaker.Set
	log      *slog.Logger

	// opts name the servers; resolved is set once they are found (their
	// names resolve, the SRV record answers): until then calls fail, and
	// each health check looks again.
	opts        Options
	resolveMu   sync.Mutex
	resolved    atomic.Bool
	closed      atomic.Bool
	stop        chan struct{}
	refreshDone chan struct{}
	closeOnce   sync.Once
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = errors.New("memcached store is closed")

// lockTTL is how long, in seconds, a lock lives if its holder never
// deletes it (a replica that died holding it): memcached expires it within
// lockTTL-1 to lockTTL seconds. A request holds its locks for a few round
// trips, and writes under them only while they have two calls' timeouts
// of life left (lockHold): three seconds and two timeouts.
func (s *Store) lockTTL() int32 {
	return 3 + int32(math.Ceil(2*s.client.Timeout.Seconds()))
}

// New returns a store on the servers opts names. It does not connect:
// Check says whether they answer. Servers whose names do not resolve yet
// (or an SRV record that does not answer) are a warning, not an error:
// calls fail until a health check finds them, as they fail while the
// servers are down.
func New(opts Options) (*Store, error) {
	if opts.LookupSRV == nil {
		opts.LookupSRV = net.DefaultResolver.LookupSRV
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	s := &Store{servers: servers{new(memcache.ServerList)}, prefix: opts.Prefix, ownKeys: opts.OwnKeys, jitter: opts.ExpirationJitter,
		clock: opts.Clock, log: opts.Logger, opts: opts, stop: make(chan struct{}), refreshDone: make(chan struct{})}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.client = memcache.NewFromSelector(s.servers)
	s.client.MaxIdleConns = opts.MaxIdleConns
	if s.client.MaxIdleConns == 0 {
		s.client.MaxIdleConns = DefaultMaxIdleConns
	}
	s.client.Timeout = opts.Timeout
	if s.client.Timeout == 0 {
		s.client.Timeout = DefaultTimeout
	}
	if opts.TLS {
		c, err := opts.tlsConfig()
		if err != nil {
			return nil, err
		}
		d := &tls.Dialer{Config: c}
		s.client.DialContext = d.DialContext
	}
	if opts.BreakerTrip > 0 {
		s.breakers = breaker.New(opts.BreakerTrip, opts.BreakerCool, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.resolve(ctx); err != nil {
		s.log.Warn("memcached: servers not found yet: calls fail until a health check finds them", "err", err)
	}
	if opts.SRV != "" && opts.SRVRefresh > 0 {
		go s.refreshSRV(opts, s.stop)
	} else {
		close(s.refreshDone)
	}
	return s, nil
}

// resolve finds the servers, once: their addresses, or the SRV record's.
func (s *Store) resolve(ctx context.Context) error {
	s.resolveMu.Lock()
	defer s.resolveMu.Unlock()
	if s.resolved.Load() {
		return nil
	}
	addrs := s.opts.Addrs
	if s.opts.SRV != "" {
		var err error
		if addrs, err = s.opts.lookup(ctx); err != nil {
			return err
		}
	}
	if err := s.servers.list.SetServers(addrs...); err != nil {
		return fmt.Errorf("memcached: servers %v: %w", addrs, err)
	}
	s.resolved.Store(true)
	return nil
}

// Name is the store's name in metrics and traces: "memcached".
func (s *Store) Name() string { return "memcached" }

// Apply decides the buckets of one request at now, all or nothing as
// limit.DecideAll decides, and saves what it charges. results must be as
// long as buckets. It fails when memcached does not answer, when ctx ends
// first (then nothing is charged, unless the writes had begun: they are
// finished, or taken back, whatever ctx says), or when two buckets of the
// request would share one key.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(results) < len(buckets) {
		return fmt.Errorf("memcached store: %d results for %d buckets", len(results), len(buckets))
	}
	if len(buckets) == 0 {
		return nil
	}
	places := make([]place, len(buckets))
	for i, b := range buckets {
		places[i] = placeOf(s.prefix, s.ownKeys, b, now)
	}
	if i, j, ok := shared(places); ok {
		return fmt.Errorf("memcached store: buckets %q and %q would count in one key %q of the reference's layout (two fixed windows of one descriptor starting together): keep such buckets in the store's own layout", buckets[i].Key, buckets[j].Key, places[i].key)
	}
	// The call may go on after ctx ends (see call): it works on copies.
	buckets = slices.Clone(buckets)
	out := make([]limit.Result, len(buckets))
	err := s.call(ctx, places[0].key, func(ctx context.Context) error {
		if len(buckets) == 1 {
			return s.applyOne(ctx, now, places[0], buckets, out)
		}
		return s.applyMany(ctx, now, places, buckets, out)
	})
	if err != nil {
		return err
	}
	copy(results, out)
	return nil
}

// shared reports two buckets at one key.
func shared(places []place) (i, j int, ok bool) {
	for i := range places {
		for j := i + 1; j < len(places); j++ {
			if places[i].key == places[j].key {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// call runs f, which talks to memcached, until it returns or ctx ends,
// whichever comes first, and tells the breaker of key's server how it went.
// memcached's client takes no context: f runs on its own goroutine and
// stops at its next wait once ctx has ended.
func (s *Store) call(ctx context.Context, key string, f func(context.Context) error) error {
	var ticket breaker.Ticket
	if s.breakers != nil {
		server := "memcached"
		if addr, err := s.servers.PickServer(key); err == nil {
			server = addr.String()
		}
		var ok bool
		if ticket, ok = s.breakers.Allow(server); !ok {
			return fmt.Errorf("memcached %s: %w", server, breaker.ErrOpen)
		}
	}
	begin := time.Now()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if s.breakers != nil {
		ticket.Done(outcome(ctx, begin, err))
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("memcached store: %w", err)
	}
	return err
}

// applyOne decides a request of one bucket: it reads the bucket and its
// lock in one command (the bucket first), waits while a request of
// several buckets holds it, and writes with compare-and-swap, deciding
// again when anything changed the bucket in between.
func (s *Store) applyOne(ctx context.Context, now time.Time, p place, buckets []limit.Bucket, out []limit.Result) error {
	b := buckets[0]
	keys := []string{p.key, lockKey(p.key)}
	states := make([]limit.State, 1)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
		items, err := s.client.GetMulti(keys)
		if err != nil {
			return err
		}
		if items[keys[1]] != nil {
			continue // locked: a request of several buckets is deciding it
		}
		it := items[p.key]
		states[0] = stateAt(p, b, it)
		admitted := limit.DecideAll(states, buckets, now, out)
		if b.Hits == 0 || !limit.Saves(b, admitted) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch err := s.write(p, b, it, out[0], now); {
		case conflict(err):
			continue
		case err != nil:
			return err
		}
		return nil
	}
}

// write saves result r of bucket b at p, over the item read (nil: none).
func (s *Store) write(p place, b limit.Bucket, read *memcache.Item, r limit.Result, now time.Time) error {
	ttl := r.TTL
	if p.counter {
		// As the reference: the window's length plus the jitter.
		ttl = b.Limit.Window
		if s.jitter > 0 {
			ttl += rand.N(s.jitter)
		}
	}
	it := &memcache.Item{Key: p.key, Value: valueOf(p, b, r.State), Expiration: expiration(ttl, s.clock())}
	if read == nil {
		return s.client.Add(it)
	}
	it.Flags, it.CasID = read.Flags, read.CasID
	return s.client.CompareAndSwap(it)
}

// conflict reports a write that failed because the bucket changed (or
// appeared, or expired) since it was read.
func conflict(err error) bool {
	return errors.Is(err, memcache.ErrCASConflict) || errors.Is(err, memcache.ErrNotStored) || errors.Is(err, memcache.ErrCacheMiss)
}

// backoff waits before attempt n (from 1) at a key others hold: a random
// time up to 50µs doubled each attempt, at most 5ms.
func backoff(ctx context.Context, n int) error {
	most := 50 * time.Microsecond << min(n, 7)
	t := time.NewTimer(rand.N(most) + time.Microsecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
