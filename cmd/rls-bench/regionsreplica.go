package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// benchReplica is one replica of a region: its exchange, its store
// wrapper, its stores and what it measured.
type benchReplica struct {
	region    int
	x         *region.Exchange
	st        *region.Store
	stores    []*redis.Store
	exchanges countExchanges
	buckets   []limit.Bucket // what it is fed, once an interval each
	fed       atomic.Int64

	mu     sync.Mutex
	timing []exchangeTiming
}

// exchangeTiming is one interval's exchange of a replica: the wall time
// of its Publish and of its Divide.
type exchangeTiming struct {
	epoch            int64
	publish, divide  time.Duration
	published, ruled bool // each succeeded
}

// openReplica opens a replica of region i of names: its own Redis as
// envoy-rls opens -redis-url (the default flags), each peer's as
// -region-peers opens them, and its exchange as openRegions makes it.
func openReplica(cfg regionsConfig, names []string, i int, log *slog.Logger) (*benchReplica, error) {
	r := &benchReplica{region: i}
	own, err := redis.New(redis.Options{Mode: redis.ScriptMode, Logger: log, Prefix: cfg.prefix, Pipeline: redis.DefaultPipeline,
		Batch: redis.DefaultBatch, Breaker: redis.Breaker{Trip: breaker.DefaultTrip, Cool: breaker.DefaultCool},
		Connect: &redis.ClientOptions{URL: cfg.urls[i]}})
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", names[i], err)
	}
	r.stores = append(r.stores, own)
	peers := map[string]region.Board{}
	for k, name := range names {
		if k == i {
			continue
		}
		st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: cfg.urls[k]}, Logger: log, Prefix: cfg.prefix})
		if err != nil {
			r.close()
			return nil, fmt.Errorf("region %s: peer %s: %w", names[i], name, err)
		}
		r.stores = append(r.stores, st)
		peers[name] = region.RedisBoard(st)
	}
	r.x, err = region.New(region.Options{Region: names[i], Regions: names, Own: region.RedisBoard(own), Peers: peers,
		Interval: cfg.interval, Silence: cfg.silence, Logger: log, Observer: &r.exchanges})
	if err != nil {
		r.close()
		return nil, err
	}
	r.st = r.x.Wrap(admitAll{})
	// Region i is asked i+1 hits of each bucket an interval: the regions'
	// demands differ, and so do their claims.
	r.buckets = make([]limit.Bucket, cfg.buckets)
	for b := range r.buckets {
		r.buckets[b] = limit.Bucket{Key: bucketKey(b), Limit: regionsLimit(cfg.interval), Hits: int64(i + 1)}
	}
	return r, nil
}

func bucketKey(b int) string { return fmt.Sprintf("api|user_u%d", b) }

func (r *benchReplica) close() {
	for _, s := range r.stores {
		s.Close()
	}
}

// feed calls Asked and Apply for each of its buckets in turn, a request
// each, spread evenly over each interval, until ctx ends.
func (r *benchReplica) feed(ctx context.Context, interval time.Duration) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	req, res := make([]limit.Bucket, 1), make([]limit.Result, 1)
	var done int64
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		due := int64(float64(len(r.buckets)) * float64(now.Sub(start)) / float64(interval))
		for ; done < due && ctx.Err() == nil; done++ {
			req[0] = r.buckets[next]
			r.x.Asked(req)
			_ = r.st.Apply(ctx, now, req, res)
			if next++; next == len(r.buckets) {
				next = 0
			}
		}
		r.fed.Store(done)
	}
}

// exchange runs Exchange.Run's schedule, timing each Publish and Divide,
// until it has divided epoch last (once last is set) or ctx ends.
func (r *benchReplica) exchange(ctx context.Context, iv time.Duration, last *atomic.Int64) {
	for {
		now := time.Now()
		next := time.Unix(0, (now.UnixNano()/int64(iv)+1)*int64(iv))
		if !sleepCtx(ctx, next.Sub(now)) {
			return
		}
		epoch := next.UnixNano() / int64(iv)
		t0 := time.Now()
		err := r.x.Publish(ctx, epoch-1, next)
		tm := exchangeTiming{epoch: epoch, publish: time.Since(t0), published: err == nil}
		if err == nil {
			if !sleepCtx(ctx, next.Add(iv/2).Sub(time.Now())) {
				return
			}
			t1 := time.Now()
			tm.ruled = r.x.Divide(ctx, epoch, t1) == nil
			tm.divide = time.Since(t1)
		}
		r.mu.Lock()
		r.timing = append(r.timing, tm)
		r.mu.Unlock()
		if l := last.Load(); l > 0 && epoch >= l {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
