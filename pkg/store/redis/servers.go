package redis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// A store keeps its buckets on one Redis, or on two: with
// Options.PerSecond, the buckets of limits counted per second
// (limit.Bucket.SecondUnit) live on the per-second Redis and the others on
// the first, as envoyproxy/ratelimit splits them with REDIS_PERSECOND.
// Where a key lives is its place: its server and, on a Cluster, its hash
// slot. Every call is made for one place, so the machinery that splits a
// Cluster request by slot and undoes the charges of a refused one splits
// a request over the two servers alike: a request is all or nothing
// across both. The per-second server decides first (applySlots).

// Server is a Redis of the store beside the first: how to reach it, as
// Options.Connect and Options.Client say for the first, and how its script
// calls are batched into pipelines.
type Server struct {
	Connect  *ClientOptions
	Client   goredis.UniversalClient
	Pipeline Pipeline
}

// server is one Redis of the store: its connection, and how to replace
// it.
type server struct {
	name     string // "redis", or "per-second redis": in errors
	client   atomic.Pointer[clients]
	connect  *ClientOptions // nil: the client is not replaced
	pipeline Pipeline
	cluster  bool
}

// The servers' numbers.
const (
	firstServer     = 0
	perSecondServer = 1
)

// place is where a key lives: its server's number in the high 16 bits,
// and its hash slot on a Cluster (0 otherwise) in the low 16.
type place uint32

func (p place) server() int { return int(p >> 16) }

// newServer returns a server of the connection c (made from connect if
// it is not nil).
func (s *Store) newServer(name string, connect *ClientOptions, c goredis.UniversalClient, pipeline Pipeline) (*server, error) {
	if pipeline.Limit < 0 || pipeline.Window < 0 {
		return nil, fmt.Errorf("%s pipeline: limit %d and window %v must not be negative", name, pipeline.Limit, pipeline.Window)
	}
	if connect != nil {
		var err error
		if c, err = NewClient(*connect); err != nil {
			return nil, prefixed(name, err)
		}
	}
	if c == nil {
		return nil, fmt.Errorf("%s store: a client is required", name)
	}
	srv := &server{name: name, connect: connect, pipeline: pipeline}
	if _, tx := s.exec.(txExec); tx {
		srv.pipeline = Pipeline{} // transactions are not batched
	}
	_, srv.cluster = c.(*goredis.ClusterClient)
	cs, err := srv.newClients(c, s.breakers)
	if err != nil {
		return nil, err
	}
	srv.client.Store(cs)
	return srv, nil
}

// prefixed names the per-second Redis in an error of its client options,
// which speak of "redis".
func prefixed(name string, err error) error {
	if name == firstName {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

const (
	firstName     = "redis"
	perSecondName = "per-second redis"
)

func (srv *server) newClients(c goredis.UniversalClient, breakers *breaker.Set) (*clients, error) {
	cs := &clients{conn: c, breakers: breakers}
	if srv.pipeline.Limit == 0 {
		return cs, nil
	}
	// The deferred face lets a call stop waiting at its deadline. Batches
	// run in parallel (Unordered): a call's reply does not depend on the
	// calls before it, and several batches keep Redis busy while replies
	// travel.
	ap, err := c.AsyncAutoPipelineWithOptions(&goredis.AutoPipelineOptions{
		MaxBatchSize:         srv.pipeline.Limit,
		MaxFlushDelay:        srv.pipeline.Window,
		MaxConcurrentBatches: pipelineBatches,
		Unordered:            true,
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s pipeline: %w", srv.name, err)
	}
	cs.batch = ap
	return cs, nil
}

// placeOf returns where the key of a bucket lives.
func (s *Store) placeOf(key string, second bool) place {
	n := firstServer
	if second && len(s.servers) > perSecondServer {
		n = perSecondServer
	}
	var sl uint16
	if s.servers[n].cluster {
		sl = slot(key)
	}
	return place(n<<16) | place(sl)
}

// places returns where each of keys lives; second tells whether item i
// is counted per second.
func (s *Store) places(keys []string, second func(i int) bool) []place {
	out := make([]place, len(keys))
	for i, k := range keys {
		out[i] = s.placeOf(k, second(i))
	}
	return out
}

// onePlace returns the place of the buckets at keys, and whether they all
// share it (and can be decided in one call).
func (s *Store) onePlace(keys []string, buckets []limit.Bucket) (place, bool) {
	first := s.placeOf(keys[0], buckets[0].SecondUnit)
	if len(s.servers) == 1 && !s.servers[firstServer].cluster {
		return first, true
	}
	for i := 1; i < len(keys); i++ {
		if s.placeOf(keys[i], buckets[i].SecondUnit) != first {
			return first, false
		}
	}
	return first, true
}

// clientsAt returns the clients of the server of p.
func (s *Store) clientsAt(p place) *clients {
	return s.servers[p.server()].client.Load()
}

// check pings the server: nil when it answers. When its client fails but
// a fresh client reaches Redis, the fresh one replaces it, so calls
// succeed as soon as Redis is back.
func (s *Store) check(ctx context.Context, srv *server) error {
	cur := srv.client.Load()
	if cc, ok := cur.conn.(*goredis.ClusterClient); ok {
		// Every master must answer. A Cluster client is not replaced: it
		// manages its nodes' connections itself.
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return m.Ping(ctx).Err() })
	}
	err := cur.conn.Ping(ctx).Err()
	if err == nil || srv.connect == nil || ctx.Err() != nil {
		return err
	}
	fresh, ferr := NewClient(*srv.connect)
	if ferr != nil {
		return err
	}
	if fresh.Ping(ctx).Err() != nil {
		fresh.Close()
		return err
	}
	next, ferr := srv.newClients(fresh, s.breakers)
	if ferr != nil {
		return err
	}
	if s.closed.Load() || !srv.client.CompareAndSwap(cur, next) {
		fresh.Close()
		return err
	}
	s.log.Info("redis store: Redis answers again; new connections replace the failed ones", "server", srv.name)
	time.AfterFunc(retireDelay, func() { cur.conn.Close() })
	return nil
}

// Check pings every Redis of the store: nil when all answer.
func (s *Store) Check(ctx context.Context) error {
	if s.closed.Load() {
		return errClosed
	}
	if len(s.servers) == 1 {
		return s.check(ctx, s.servers[firstServer])
	}
	errs := make([]error, len(s.servers))
	parallelN(len(s.servers), func(i int) {
		if err := s.check(ctx, s.servers[i]); err != nil {
			errs[i] = fmt.Errorf("%s: %w", s.servers[i].name, err)
		}
	})
	return errors.Join(errs...)
}

// Close closes the Redis clients; Check fails afterwards.
func (s *Store) Close() error {
	s.closed.Store(true)
	if s.batch != nil {
		s.batch.close()
	}
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.client.Load().conn.Close())
	}
	return errors.Join(errs...)
}

// parallelN runs f(0) to f(n-1) in parallel and waits for them.
func parallelN(n int, f func(i int)) {
	if n == 0 {
		return
	}
	if n == 1 {
		f(0)
		return
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	parallel(idx, f)
}
