// Package redis is the Redis store of buckets of every algorithm, for
// several service replicas sharing one Redis, a Sentinel-managed Redis or a
// Redis Cluster. It decides every request on Redis, exactly; deciding in
// process against leases is package localfirst's.
//
// In the default script mode, one Lua script (a port of limit.DecideAll)
// reads, decides and charges all buckets of a request that share a hash
// slot in one round trip, on the Redis server's clock, so replicas with
// skewed clocks agree; with Options.Batch, one call decides several queued
// requests of a slot in turn, each all or nothing. In transactions mode, for
// Redis-compatible servers without scripting, each request is a WATCH /
// MULTI / EXEC transaction that decides with limit.DecideAll in Go.
//
// No call takes more than maxCallBuckets (256) buckets, since Redis serves
// nobody else while it runs one: a request of more, in one slot, is
// decided in several calls, one after another, each like a slot of its own
// below; so are a batch, a lease and a reset of many buckets.
//
// A request whose buckets span several Cluster slots (several descriptors
// with different first entries), or several calls, is decided per slot, in
// parallel, and per call in a slot, in turn; if one call rejects, what the
// others charged is undone: each bucket nobody has touched since is put
// back exactly as it was, and the others lose what the request added (the
// calls sent after it charge nothing but what charges always). Two
// windows remain. Between a call's charge and its undo (the round trips
// in between), another request can see its buckets fuller than they will
// be and be rejected. And a call whose reply is lost (a timeout after
// Redis ran it) may have charged without the store knowing: it is not
// retried (that could charge twice), nor undone; its buckets stay charged
// until they drain. The same holds for a single Redis.
//
// With Options.PerSecond, the buckets of limits counted per second live
// on a second Redis (single, Sentinel or Cluster, each with its own
// breakers and timeouts) and the others on the first. A request with
// buckets on both is split like one that spans slots: its calls go to
// the per-second Redis, then to the first, and if one refuses, what the
// other charged is undone, with the same two windows (servers.go).
//
// State reads buckets without charging them, and Reset deletes them and
// publishes their keys on <prefix>resets, where WatchResets hears them, so
// that every replica can drop them from its over-limit cache.
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

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
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
	// Pipeline batches concurrent script calls; the zero value sends each
	// call on its own.
	Pipeline Pipeline
	// Batch is the most requests of concurrent calls one script call
	// decides, when their buckets share a slot (script mode), and 256
	// buckets in all; 0 or 1 decides each request in its own call.
	Batch int
	// BatchWait is how long requests that find their slot idle (no call
	// out), fewer than Batch, wait for more before their call is sent: 0
	// sends at once. Where few requests reach Redis (the local-first
	// mode's), a short wait makes calls of several requests, and saves
	// Redis and the service the cost of a call for each. Requests that
	// came while the slot's call was out go as soon as it returns. The
	// wait is cut short where it only delays: few callers, each waiting
	// on its answer (batch.go).
	BatchWait time.Duration
	// BatchPace, if not 0, keeps a slot's calls at least this far apart
	// while requests keep coming (not for a lone caller, each request
	// waiting on its answer): each call then gathers what came meanwhile.
	// On a busy machine a Redis round trip costs Redis and the service far
	// more than a few buckets' work, and a slot's next call otherwise goes
	// as soon as the last is back. The local-first mode's, whose requests
	// that reach Redis are a few at a time, at the cost of that wait for
	// them. It needs BatchWait, whose waits tell a lone caller apart.
	BatchPace time.Duration
	// Breaker, if Trip is not 0, answers the calls of a Redis node (of
	// the whole Redis, but for a Cluster) by the failure mode at once
	// after Trip script calls in a row timed out on it, for Cool; then
	// one call probes it (package breaker). Script mode only.
	Breaker Breaker
	// PerSecond, if set, is a second Redis for the buckets of limits
	// counted per second (limit.Bucket.SecondUnit); the first keeps the
	// others (servers.go). Every other option applies to both.
	PerSecond *Server
}

// Breaker is when a Redis node's calls stop being sent (package breaker).
type Breaker struct {
	Trip int
	Cool time.Duration
}

// Pipeline says how concurrent script calls are batched into pipelines:
// one write and one read for many calls, on the client and on Redis, which
// is where a busy store spends its time. (Transactions mode does not batch.)
type Pipeline struct {
	// Limit is the most calls in one pipeline; 0 turns batching off.
	Limit int
	// Window is how long a pipeline waits for more calls after one is sent;
	// 0 sends what is queued at once, so calls that arrive while a pipeline
	// is out batch into the next one without waiting.
	Window time.Duration
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	// servers are the first Redis, then the per-second one, if any.
	servers   []*server
	closed    atomic.Bool
	exec      executor
	batch     *batcher // nil: a script call per request
	keyPrefix string   // the prefix, and the mode's own mark
	// resetChannel is where Reset tells every replica of the keys it
	// reset (WatchResets): the prefix, then "resets", on the first Redis.
	resetChannel string
	callerClock  bool
	// refSkew moves the service's clock that calendar windows' periods
	// are sent around (when.ref) from the time Apply is given: only tests
	// set it, to skew the two clocks.
	refSkew  time.Duration
	breakers *breaker.Set // nil: none
	log      *slog.Logger
	// expiredReports are the fields of the regions' hash its last
	// ExchangeReport found past their expiry: the next deletes them if
	// they still are; heldReports the reports it read, by field, which
	// the next reads again only if their heads changed (regions.go).
	reportsMu      sync.Mutex
	expiredReports []string
	heldReports    map[string]heldReport
	// serverAhead is how far the Redis server's clock is ahead of this
	// one's, µs, as the last report call found it (serverKnown once one
	// has); value is the room of a report call's value, under valueMu.
	serverAhead atomic.Int64
	serverKnown atomic.Bool
	valueMu     sync.Mutex
	value       []byte
}

// executor decides buckets whose keys share a slot. now is Unix
// microseconds, or -1 for the server's clock; both methods return the time
// they used.
type executor interface {
	// run decides the buckets atomically with the all-or-nothing rule, at
	// w. If before is not nil, it receives each bucket as it was before
	// being charged (dripped to now), for undo.
	run(ctx context.Context, c *clients, w when, keys []string, buckets []limit.Bucket, results []limit.Result, before []limit.State) (int64, error)
	// undo takes back changes, atomically, and never rejects; it returns
	// the buckets' states afterwards.
	undo(ctx context.Context, c *clients, now int64, keys []string, changes []change) ([]limit.State, int64, error)
	// read queues the read of a bucket's stored form, for state.
	read(ctx context.Context, p goredis.Pipeliner, key string) goredis.Cmder
	// state returns the state read, as run would load it: empty when
	// there is none, or none it can read.
	state(read goredis.Cmder, algo limit.Algorithm) limit.State
}

// change is what a decision did to one bucket, for undo: a leaky bucket's
// state before and after, a window's hits and when they were charged.
type change struct {
	limit         limit.Limit
	before, after limit.State
	beforeTTL     time.Duration // how long the state before was to be kept
	hits, at      int64         // a window's charge, at Unix microseconds
}

// New returns a store on opts.Client. It does not contact Redis: a Redis that
// is down makes Apply and Check fail until it answers.
func New(opts Options) (*Store, error) {
	if opts.Connect == nil && opts.Client == nil {
		return nil, errors.New("redis store: a client is required")
	}
	if opts.PerSecond != nil && opts.PerSecond.Connect == nil && opts.PerSecond.Client == nil {
		return nil, errors.New("per-second redis store: a client is required")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{keyPrefix: opts.Prefix, resetChannel: opts.Prefix + "resets", callerClock: opts.CallerClock, log: opts.Logger}
	switch opts.Mode {
	case ScriptMode:
		s.exec = scriptExec{}
	case TransactionsMode:
		s.exec = txExec{}
		s.keyPrefix += txPrefix
	default:
		return nil, fmt.Errorf("redis store: unknown mode %d", opts.Mode)
	}
	if opts.Batch < 0 {
		return nil, fmt.Errorf("redis store: batch %d must not be negative", opts.Batch)
	}
	if opts.BatchWait < 0 {
		return nil, fmt.Errorf("redis store: batch wait %v must not be negative", opts.BatchWait)
	}
	if opts.BatchPace < 0 || (opts.BatchPace > 0 && opts.BatchWait == 0) {
		return nil, fmt.Errorf("redis store: batch pace %v must not be negative, and needs a batch wait (got %v)", opts.BatchPace, opts.BatchWait)
	}
	if opts.Breaker.Trip < 0 || opts.Breaker.Cool < 0 {
		return nil, fmt.Errorf("redis store: breaker trip %d and cool %v must not be negative", opts.Breaker.Trip, opts.Breaker.Cool)
	}
	if opts.Breaker.Trip > 0 && opts.Mode == ScriptMode {
		s.breakers = breaker.New(opts.Breaker.Trip, opts.Breaker.Cool, nil)
	}
	first, err := s.newServer(firstName, opts.Connect, opts.Client, opts.Pipeline)
	if err != nil {
		return nil, err
	}
	s.servers = []*server{first}
	if ps := opts.PerSecond; ps != nil {
		second, err := s.newServer(perSecondName, ps.Connect, ps.Client, ps.Pipeline)
		if err != nil {
			first.client.Load().conn.Close()
			return nil, err
		}
		s.servers = append(s.servers, second)
	}
	if opts.Mode == ScriptMode && opts.Batch > 1 {
		s.batch = newBatcher(s, opts.Batch, opts.BatchWait, opts.BatchPace)
	}
	return s, nil
}

// clients are a Redis client and, when script calls are batched, its
// autopipeliner.
type clients struct {
	conn     goredis.UniversalClient
	batch    *goredis.AutoPipeliner // nil: each call on its own
	breakers *breaker.Set           // the store's, which outlive clients; nil: none
}

// DefaultBatch is the most requests one script call decides by default.
const DefaultBatch = 32

// DefaultPipeline batches up to 256 calls, without waiting.
var DefaultPipeline = Pipeline{Limit: 256}

// pipelineBatches is how many batches may be out at once.
const pipelineBatches = 4

// Name is the store's name in metrics and traces: "redis".
func (s *Store) Name() string { return "redis" }

// Apply decides the buckets of one request with the all-or-nothing rule of
// limit.DecideAll and charges them if the request is admitted. An error
// means Redis did not answer in time (or refused); nothing is charged then,
// except in the window described in the package documentation.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	if len(buckets) == 0 {
		return nil
	}
	if len(results) < len(buckets) {
		return fmt.Errorf("redis store: %d results for %d buckets", len(results), len(buckets))
	}
	at := s.when(now)
	keys := s.keys(buckets)
	if w := callWeights(buckets); w <= maxCallBuckets {
		if p, one := s.onePlace(keys, buckets); one {
			if s.batch != nil {
				return s.batch.submit(ctx, p, w, at, keys, buckets, results[:len(buckets)])
			}
			_, err := s.exec.run(ctx, s.clientsAt(p), at, keys, buckets, results[:len(buckets)], nil)
			return err
		}
	}
	return s.applySlots(ctx, at, keys, buckets, results)
}

// at is the time argument of a script call: now with the caller's clock,
// else -1 for the server's.
func (s *Store) at(now time.Time) int64 {
	if s.callerClock {
		return now.UnixMicro()
	}
	return -1
}

// when is the time a decision is made at: at, Unix microseconds, or -1
// for the server's clock; and ref, the service's own clock then (Unix
// microseconds), around which a calendar window's periods are sent for
// the script to pick from by the time it decides at (args.go).
type when struct{ at, ref int64 }

// when returns the time of a decision Apply is asked for at now.
func (s *Store) when(now time.Time) when {
	return when{at: s.at(now), ref: now.Add(s.refSkew).UnixMicro()}
}

// keys returns the Redis keys of buckets.
func (s *Store) keys(buckets []limit.Bucket) []string {
	return bucketKeys(s.keyPrefix, buckets)
}

// retireDelay is how long a replaced client stays open for the calls that
// still use it.
const retireDelay = 10 * time.Second

var errClosed = errors.New("redis store is closed")

func micros(us int64) time.Duration {
	return time.Duration(us) * time.Microsecond
}
