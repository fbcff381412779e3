// Package redis is the Redis store of leaky buckets, for several service
// replicas sharing one Redis, a Sentinel-managed Redis or a Redis Cluster.
//
// In the default script mode, one Lua script (a line-by-line port of
// leaky.DecideAll) reads, decides and charges all buckets of a request that
// share a hash slot in one round trip, on the Redis server's clock, so
// replicas with skewed clocks agree. In transactions mode, for
// Redis-compatible servers without scripting, each request is a WATCH /
// MULTI / EXEC transaction that decides with leaky.DecideAll in Go.
//
// A request whose buckets span several Cluster slots (several descriptors
// with different first entries) is decided per slot, in parallel; if one
// slot rejects, what the others charged is refunded.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// Mode is how the store talks to Redis.
type Mode int

const (
	// ScriptMode decides each slot's buckets in one Lua script call.
	ScriptMode Mode = iota
	// TransactionsMode decides them in a WATCH/MULTI/EXEC transaction, for
	// servers that disable scripting.
	TransactionsMode
)

// ParseMode parses "script" or "transactions".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "script":
		return ScriptMode, nil
	case "transactions":
		return TransactionsMode, nil
	}
	return 0, fmt.Errorf("unknown Redis mode %q: want script or transactions", s)
}

// Options configure a Store.
type Options struct {
	// Connect says how to reach Redis. The store makes its client from it,
	// and a fresh one when Check finds that Redis answers again after an
	// outage (go-redis's pool, once it has failed to dial, tries again only
	// once a second).
	Connect *ClientOptions
	// Client, if Connect is nil, is the Redis connection to use as it is:
	// a *goredis.Client (single or Sentinel) or a *goredis.ClusterClient.
	// Close closes it.
	Client goredis.UniversalClient
	// Mode is ScriptMode (default) or TransactionsMode.
	Mode Mode
	// Prefix starts every key; default DefaultPrefix.
	Prefix string
	// CallerClock decides at the time Apply is given instead of the Redis
	// server's clock. Only for tests that need fixed instants: replicas with
	// skewed clocks then disagree.
	CallerClock bool
	// Logger receives failed refunds; default slog.Default().
	Logger *slog.Logger
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	client      atomic.Pointer[goredis.UniversalClient]
	connect     *ClientOptions // nil: the client is not replaced
	exec        executor
	keyPrefix   string // the prefix, and the mode's own mark
	cluster     bool
	callerClock bool
	log         *slog.Logger
}

// executor decides buckets whose keys share a slot, atomically, with the
// all-or-nothing rule. now is Unix microseconds, or -1 for the server's
// clock.
type executor interface {
	run(ctx context.Context, c goredis.UniversalClient, now int64, keys []string, buckets []leaky.Bucket, results []leaky.Result) error
}

// New returns a store on opts.Client. It does not contact Redis: a Redis that
// is down makes Apply and Check fail until it answers.
func New(opts Options) (*Store, error) {
	if opts.Connect != nil {
		c, err := NewClient(*opts.Connect)
		if err != nil {
			return nil, err
		}
		opts.Client = c
	}
	if opts.Client == nil {
		return nil, errors.New("redis store: a client is required")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{connect: opts.Connect, keyPrefix: opts.Prefix, callerClock: opts.CallerClock, log: opts.Logger}
	s.client.Store(&opts.Client)
	_, s.cluster = opts.Client.(*goredis.ClusterClient)
	switch opts.Mode {
	case ScriptMode:
		s.exec = scriptExec{}
	case TransactionsMode:
		s.exec = txExec{}
		s.keyPrefix += txPrefix
	default:
		return nil, fmt.Errorf("redis store: unknown mode %d", opts.Mode)
	}
	return s, nil
}

// Apply decides the buckets of one request with the all-or-nothing rule of
// leaky.DecideAll and charges them if the request is admitted. An error
// means Redis did not answer in time (or refused); nothing is charged then,
// except in the window described in the package documentation.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []leaky.Bucket, results []leaky.Result) error {
	if len(buckets) == 0 {
		return nil
	}
	if len(results) < len(buckets) {
		return fmt.Errorf("redis store: %d results for %d buckets", len(results), len(buckets))
	}
	at := int64(-1)
	if s.callerClock {
		at = now.UnixMicro()
	}
	keys := make([]string, len(buckets))
	for i, b := range buckets {
		keys[i] = redisKey(s.keyPrefix, b.Key)
	}
	c := *s.client.Load()
	if !s.cluster || sameSlot(keys) {
		return s.exec.run(ctx, c, at, keys, buckets, results[:len(buckets)])
	}
	return s.applySlots(ctx, c, at, keys, buckets, results)
}

func sameSlot(keys []string) bool {
	first := slot(keys[0])
	for _, k := range keys[1:] {
		if slot(k) != first {
			return false
		}
	}
	return true
}

// part is the buckets of one slot, decided by one executor call.
type part struct {
	index   []int // positions in the request
	keys    []string
	buckets []leaky.Bucket
	results []leaky.Result
	err     error
}

func (p *part) add(i int, key string, b leaky.Bucket) {
	p.index = append(p.index, i)
	p.keys = append(p.keys, key)
	p.buckets = append(p.buckets, b)
}

// admitted reports whether every bucket of the part not in shadow mode
// admitted its hits: the part was charged.
func (p *part) admitted() bool {
	for i, r := range p.results {
		if !r.Admitted && !p.buckets[i].Shadow {
			return false
		}
	}
	return true
}

// applySlots decides a request whose buckets span several slots: one call
// per slot, in parallel. If any slot rejects or fails, the slots that
// charged are refunded, so a rejected request still charges nothing.
func (s *Store) applySlots(ctx context.Context, c goredis.UniversalClient, at int64, keys []string, buckets []leaky.Bucket, results []leaky.Result) error {
	var parts []*part
	slots := map[uint16]*part{}
	for i, k := range keys {
		sl := slot(k)
		p := slots[sl]
		if p == nil {
			p = &part{}
			slots[sl] = p
			parts = append(parts, p)
		}
		p.add(i, k, buckets[i])
	}
	s.runParts(ctx, c, at, parts)

	var failed error
	admitted := true
	for _, p := range parts {
		if p.err != nil {
			failed = errors.Join(failed, p.err)
		} else if !p.admitted() {
			admitted = false
		}
	}
	if failed == nil && admitted {
		scatter(parts, results)
		return nil
	}

	// Refund every part that was charged.
	var refunds []*part
	for _, p := range parts {
		if p.err == nil && p.admitted() {
			if r := refund(p); r != nil {
				refunds = append(refunds, r)
			}
		}
	}
	// The refund must happen even if the call has just ended, but not hang.
	refundCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	s.runParts(refundCtx, c, at, refunds)
	scatter(parts, results)
	for _, r := range refunds {
		if r.err != nil {
			s.log.Error("redis store: refunding a rejected request failed: its buckets stay charged until they drain",
				"keys", r.keys, "err", r.err)
			failed = errors.Join(failed, r.err)
			continue
		}
		for j, i := range r.index {
			r.results[j].Admitted = true // the bucket had room; the request was refused elsewhere
			results[i] = r.results[j]
		}
	}
	return failed
}

// refundTimeout bounds the refund of a request rejected in another slot.
const refundTimeout = time.Second

// refund returns the part that gives back what p charged, or nil.
func refund(p *part) *part {
	r := &part{}
	for j, b := range p.buckets {
		if p.results[j].Admitted && b.Hits != 0 {
			b.Hits, b.Shadow = -b.Hits, false
			r.add(p.index[j], p.keys[j], b)
		}
	}
	if len(r.index) == 0 {
		return nil
	}
	return r
}

func (s *Store) runParts(ctx context.Context, c goredis.UniversalClient, at int64, parts []*part) {
	var wg sync.WaitGroup
	for _, p := range parts {
		p.results = make([]leaky.Result, len(p.buckets))
		wg.Go(func() { p.err = s.exec.run(ctx, c, at, p.keys, p.buckets, p.results) })
	}
	wg.Wait()
}

// scatter copies the parts' results to their places in the request.
func scatter(parts []*part, results []leaky.Result) {
	for _, p := range parts {
		if p.err != nil {
			continue
		}
		for j, i := range p.index {
			results[i] = p.results[j]
		}
	}
}

// Check pings Redis: nil when it answers. When the store's client fails
// but a fresh client reaches Redis, the fresh one replaces it, so calls
// succeed as soon as Redis is back.
func (s *Store) Check(ctx context.Context) error {
	cur := s.client.Load()
	err := (*cur).Ping(ctx).Err()
	if err == nil || s.connect == nil || ctx.Err() != nil {
		return err
	}
	fresh, ferr := NewClient(*s.connect)
	if ferr != nil {
		return err
	}
	if fresh.Ping(ctx).Err() != nil || !s.client.CompareAndSwap(cur, &fresh) {
		fresh.Close()
		return err
	}
	s.log.Info("redis store: Redis answers again; new connections replace the failed ones")
	old := *cur
	time.AfterFunc(retireDelay, func() { old.Close() })
	return nil
}

// retireDelay is how long a replaced client stays open for the calls that
// still use it.
const retireDelay = 10 * time.Second

// Close closes the Redis client.
func (s *Store) Close() error {
	return (*s.client.Load()).Close()
}

func micros(us int64) time.Duration {
	return time.Duration(us) * time.Microsecond
}
