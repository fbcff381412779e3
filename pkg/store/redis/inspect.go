package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// State returns the stored state of each bucket, changing nothing:
// states[i] is buckets[i]'s (by its key, and its limit's algorithm, which
// says how it is stored), empty when Redis holds none. It returns the time
// the states are for: the Redis server's (TIME, read with the buckets),
// or now with CallerClock, as Apply would decide at. With a per-second
// Redis, it is the first Redis's time when it holds some of the buckets:
// the two servers' clocks are taken to agree, as replicas' are.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	if s.closed.Load() {
		return now, errClosed
	}
	if len(states) < len(buckets) {
		return now, fmt.Errorf("redis store: %d states for %d buckets", len(states), len(buckets))
	}
	if len(s.servers) == 1 || len(buckets) == 0 {
		at, err := s.read(ctx, s.clientsAt(0), s.at(now), s.keys(buckets), buckets, states)
		if err != nil {
			return now, err
		}
		return time.UnixMicro(at), nil
	}
	nows, err := s.readAll(ctx, s.at(now), s.keys(buckets), buckets, states)
	if err != nil {
		return now, err
	}
	at := nows[0]
	for i, b := range buckets {
		if !b.SecondUnit {
			at = nows[i]
			break
		}
	}
	return time.UnixMicro(at), nil
}

// readAll reads the buckets at keys into states, each on the server it
// lives on (the servers in parallel), and returns the time each was read
// at: at (Unix microseconds) if given, else its server's.
func (s *Store) readAll(ctx context.Context, at int64, keys []string, buckets []limit.Bucket, states []limit.State) ([]int64, error) {
	nows := make([]int64, len(keys))
	if len(s.servers) == 1 {
		now, err := s.read(ctx, s.clientsAt(0), at, keys, buckets, states)
		for i := range nows {
			nows[i] = now
		}
		return nows, err
	}
	index := make([][]int, len(s.servers))
	for i, b := range buckets {
		n := s.placeOf(keys[i], b.SecondUnit).server()
		index[n] = append(index[n], i)
	}
	errs := make([]error, len(s.servers))
	parallelN(len(s.servers), func(n int) {
		idx := index[n]
		if len(idx) == 0 {
			return
		}
		ks, bs, sts := make([]string, len(idx)), make([]limit.Bucket, len(idx)), make([]limit.State, len(idx))
		for j, i := range idx {
			ks[j], bs[j] = keys[i], buckets[i]
		}
		now, err := s.read(ctx, s.servers[n].client.Load(), at, ks, bs, sts)
		if err != nil {
			errs[n] = prefixed(s.servers[n].name, err)
			return
		}
		for j, i := range idx {
			states[i], nows[i] = sts[j], now
		}
	})
	return nows, errors.Join(errs...)
}

// read reads the buckets at keys into states, and the server's time unless
// at (Unix microseconds) is given; it returns the time. It makes no script
// call: each bucket is its own command in one pipeline, and Redis serves
// other callers between them, however many there are.
func (s *Store) read(ctx context.Context, c *clients, at int64, keys []string, buckets []limit.Bucket, states []limit.State) (int64, error) {
	// One pipeline, whatever the slots: a Cluster client sends each read
	// to its node. Reads need no atomicity across slots. Each command's
	// error is looked at below: Pipelined's own is the first of them,
	// which may be a GET's "no such key".
	var t *goredis.TimeCmd
	cmds := make([]goredis.Cmder, len(keys))
	c.conn.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if at < 0 {
			t = p.Time(ctx)
		}
		for i, k := range keys {
			cmds[i] = s.exec.read(ctx, p, k)
		}
		return nil
	})
	if t != nil {
		if err := t.Err(); err != nil {
			return at, fmt.Errorf("redis store: reading the time: %w", err)
		}
		at = t.Val().UnixMicro()
	}
	for i, b := range buckets {
		if err := cmds[i].Err(); err != nil && !errors.Is(err, goredis.Nil) {
			return at, fmt.Errorf("redis store: reading buckets: %w", err)
		}
		states[i] = s.exec.state(cmds[i], b.Limit.Algorithm)
	}
	return at, nil
}

// Reset deletes the buckets with these keys, so the next request finds
// them empty, then tells every store watching this Redis and prefix
// (WatchResets), so that replicas drop them from their over-limit caches.
// The keys go in DELs of one slot and at most maxCallBuckets keys each, in
// one pipeline: Redis serves other callers between two DELs, where one DEL
// of 40,000 keys held it 10 to 20 ms. With a per-second Redis, a key
// does not say which server holds it: both are cleared, and the message
// goes on the first.
func (s *Store) Reset(ctx context.Context, keys []string) error {
	if s.closed.Load() {
		return errClosed
	}
	if len(keys) == 0 {
		return nil
	}
	rks := make([]string, len(keys))
	for i, k := range keys {
		rks[i] = redisKey(s.keyPrefix, k)
	}
	errs := make([]error, len(s.servers))
	parallelN(len(s.servers), func(n int) {
		if err := s.deleteOn(ctx, n, rks); err != nil {
			errs[n] = fmt.Errorf("%s store: deleting buckets: %w", s.servers[n].name, err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c := s.clientsAt(0).conn
	// After the DEL, so that a replica told of the reset finds the
	// buckets gone. In messages of resetMessageKeys: one message of every
	// key held Redis (and, on a Cluster, every node it is sent to) for
	// tens of milliseconds at 40,000 keys.
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for start := 0; start < len(keys); start += resetMessageKeys {
			msg, err := json.Marshal(keys[start:min(start+resetMessageKeys, len(keys))])
			if err != nil {
				return err
			}
			p.Publish(ctx, s.resetChannel, msg)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis store: the buckets are reset, but telling the other replicas failed: %w", err)
	}
	return nil
}

// deleteOn deletes the Redis keys rks on server n.
func (s *Store) deleteOn(ctx context.Context, n int, rks []string) error {
	where := s.places(rks, func(int) bool { return n == perSecondServer })
	type del struct{ keys []string }
	runs, _ := cut(where, func(int) int { return 1 }, func(d *del, i int) { d.keys = append(d.keys, rks[i]) })
	_, err := s.servers[n].client.Load().conn.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, run := range runs {
			for _, d := range run {
				p.Del(ctx, d.keys...)
			}
		}
		return nil
	})
	return err
}

// resetMessageKeys is the most keys one reset message names.
const resetMessageKeys = 500

// resubscribeCheck is how often WatchResets looks whether the store's
// client was replaced (after an outage), and pings its subscription.
const resubscribeCheck = 5 * time.Second

// WatchResets calls forget with the bucket keys of every reset made
// through a store on this Redis (the first) and prefix (this one's own included),
// until ctx ends. A message published while this replica is not
// subscribed (Redis unreachable, a connection being replaced) is lost, so
// on every subscription after the first forget is called with nil: forget
// every key, as a missed reset may have named any.
func (s *Store) WatchResets(ctx context.Context, forget func(keys []string)) {
	first := true
	for ctx.Err() == nil {
		c := s.clientsAt(0)
		ps := c.conn.Subscribe(ctx, s.resetChannel)
		s.readResets(ctx, c, ps, forget, &first)
		ps.Close()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// readResets passes on the messages of one subscription until ctx ends
// or the store's client is replaced.
func (s *Store) readResets(ctx context.Context, c *clients, ps *goredis.PubSub, forget func([]string), first *bool) {
	ch := ps.ChannelWithSubscriptions(goredis.WithChannelHealthCheckInterval(resubscribeCheck))
	tick := time.NewTicker(resubscribeCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if s.clientsAt(0) != c {
				return // replaced: subscribe on the new client
			}
		case m, ok := <-ch:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind == "subscribe" {
					if !*first {
						forget(nil)
					}
					*first = false
				}
			case *goredis.Message:
				var keys []string
				if err := json.Unmarshal([]byte(m.Payload), &keys); err != nil {
					s.log.Warn("redis store: a reset message that is not a list of keys: forgetting every key", "channel", m.Channel, "err", err)
					keys = nil
				}
				forget(keys)
			}
		}
	}
}
