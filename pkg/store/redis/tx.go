package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// txExec decides a slot's buckets in a Redis transaction, for servers that
// disable scripting. It keeps the state and the operations of the atomic
// leaky bucket design: per bucket a counter and the timestamp of its last
// drip, changed only by atomic increments and decrements (HINCRBY, on the
// two fields of one hash per bucket) inside MULTI/EXEC. That design detects
// a conflicting drip after the fact, with a canary read of the timestamp,
// and rolls it back, and it charges without a check, letting a bucket
// overfill under concurrency. Here the buckets are WATCHed instead: a
// conflicting change makes EXEC apply nothing, and the request is decided
// again, by limit.DecideAll. An attempt is three round trips: WATCH, a
// pipeline that reads the server's TIME and the buckets, and MULTI/EXEC.
type txExec struct{}

// txPrefix follows the store's prefix in transaction-mode keys, which hold
// hashes, so they never meet the script mode's strings (whose keys have the
// '{' right after the prefix).
const txPrefix = "tx:"

// The fields of a bucket's hash: a leaky bucket's or a fixed window's
// counter and timestamp; a sliding window's state, encoded as the script
// mode stores it (encodeWindow).
const (
	counterField   = "c"
	timestampField = "t"
	windowField    = "w"
)

// maxAttempts bounds the attempts of one transaction under contention.
const maxAttempts = 100

// watched runs attempt under WATCH of keys until it commits, trying again
// when another client changed a key first.
func watched(ctx context.Context, c goredis.UniversalClient, keys []string, attempt func(tx *goredis.Tx) error) error {
	for n := 1; ; n++ {
		err := c.Watch(ctx, attempt, keys...)
		if !errors.Is(err, goredis.TxFailedErr) {
			if err != nil {
				return fmt.Errorf("redis transaction: %w", err)
			}
			return nil
		}
		if n == maxAttempts {
			return fmt.Errorf("redis transaction: gave up after %d conflicting attempts", n)
		}
		// Another request changed a bucket first: a short random pause, so
		// that contenders spread out, and again.
		pause := time.Duration(rand.Int64N(int64(min(n, 20)) * int64(50*time.Microsecond)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis transaction: gave up after %d conflicts: %w", n, ctx.Err())
		case <-time.After(pause):
		}
	}
}

func (txExec) run(ctx context.Context, cs *clients, w when, keys []string, buckets []limit.Bucket, results []limit.Result, before []limit.State) (int64, error) {
	var at int64
	err := watched(ctx, cs.conn, keys, func(tx *goredis.Tx) error {
		states, stored, t, err := readBuckets(ctx, tx, keys, w.at)
		if err != nil {
			return err
		}
		at = t
		admitted := limit.DecideAll(states, buckets, time.UnixMicro(at), results)
		if before != nil {
			for i, st := range states {
				before[i] = limit.Decide(st, buckets[i].Limit, time.UnixMicro(at), 0).State
			}
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			wrote := false
			for i, r := range results {
				b := buckets[i]
				switch {
				case !limit.Saves(b, admitted):
					continue // a rejected request changes nothing but what charges always
				case b.Limit.Algorithm != limit.LeakyBucket && (b.Hits == 0 || (!r.Admitted && !b.Always)):
					continue // a window not charged: as it was
				}
				write(ctx, p, keys[i], b.Limit.Algorithm, states[i], stored[i], r.State, r.TTL)
				wrote = true
			}
			if !wrote {
				// Nothing to write, but EXEC still checks that the state read
				// was current: a decision on a stale read is made again.
				p.Ping(ctx)
			}
			return nil
		})
		return err
	})
	return at, err
}

func (txExec) undo(ctx context.Context, cs *clients, now int64, keys []string, changes []change) ([]limit.State, int64, error) {
	var (
		at  int64
		out = make([]limit.State, len(changes))
	)
	err := watched(ctx, cs.conn, keys, func(tx *goredis.Tx) error {
		states, stored, t, err := readBuckets(ctx, tx, keys, now)
		if err != nil {
			return err
		}
		at = t
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for i, ch := range changes {
				out[i] = undone(states[i], stored[i], ch)
				ttl := ch.beforeTTL
				if ch.limit.Algorithm != limit.LeakyBucket || (stored[i] && !sameState(states[i], ch.after)) {
					ttl = -1 // a window, or changed by others: keep the expiry
				}
				write(ctx, p, keys[i], ch.limit.Algorithm, states[i], stored[i], out[i], ttl)
			}
			return nil
		})
		return err
	})
	return out, at, err
}

func sameState(a, b limit.State) bool {
	return a.Counter == b.Counter && a.Timestamp == b.Timestamp
}

// undone returns a bucket once a change is taken back: a leaky bucket as
// it was before, if nobody has changed it since, else less what the change
// added; a window less the hits in the (sub-)window they were charged to,
// if it still counts them. undo.lua is its twin.
func undone(cur limit.State, stored bool, ch change) limit.State {
	if ch.limit.Algorithm != limit.LeakyBucket {
		return limit.Uncharge(cur, ch.limit, time.UnixMicro(ch.at), ch.hits)
	}
	if (stored && sameState(cur, ch.after)) || (!stored && ch.after.Counter == 0) {
		return ch.before
	}
	c := cur.Counter - (ch.after.Counter - ch.before.Counter)
	switch {
	case c <= 0:
		return limit.State{}
	case !stored:
		return limit.State{Counter: c, Timestamp: ch.before.Timestamp}
	}
	return limit.State{Counter: c, Timestamp: cur.Timestamp}
}

func (txExec) read(ctx context.Context, p goredis.Pipeliner, key string) goredis.Cmder {
	return p.HMGet(ctx, key, counterField, timestampField, windowField)
}

// state reads a bucket's hash as readBuckets does.
func (txExec) state(read goredis.Cmder, _ limit.Algorithm) limit.State {
	cmd, ok := read.(*goredis.SliceCmd)
	if !ok || cmd.Err() != nil {
		return limit.State{}
	}
	st, _ := readState(cmd.Val())
	return st
}

// readBuckets reads the server's time (unless now is given) and the buckets.
func readBuckets(ctx context.Context, tx *goredis.Tx, keys []string, now int64) ([]limit.State, []bool, int64, error) {
	var timeCmd *goredis.TimeCmd
	reads := make([]*goredis.SliceCmd, len(keys))
	_, err := tx.Pipelined(ctx, func(p goredis.Pipeliner) error {
		timeCmd = p.Time(ctx)
		for i, k := range keys {
			reads[i] = p.HMGet(ctx, k, counterField, timestampField, windowField)
		}
		return nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	if now < 0 {
		t, err := timeCmd.Result()
		if err != nil {
			return nil, nil, 0, err
		}
		now = t.UnixMicro()
	}
	states := make([]limit.State, len(keys))
	stored := make([]bool, len(keys))
	for i := range keys {
		states[i], stored[i] = readState(reads[i].Val())
	}
	return states, stored, now, nil
}

// write queues the commands that take a bucket from old to s, to expire
// after ttl (-1: keep its expiry).
func write(ctx context.Context, p goredis.Pipeliner, key string, algo limit.Algorithm, old limit.State, stored bool, s limit.State, ttl time.Duration) {
	if algo == limit.SlidingWindow {
		switch v := encodeWindow(s); {
		case v == "":
			if stored {
				p.Del(ctx, key) // counts nothing: nothing to keep
			}
			return
		default:
			p.HSet(ctx, key, windowField, v)
		}
		if ttl >= 0 {
			p.PExpire(ctx, key, time.Duration(ceilMillis(ttl))*time.Millisecond)
		}
		return
	}
	switch {
	case s.Counter <= 0:
		if stored {
			p.Del(ctx, key) // empty: nothing to keep
		}
		return
	case !stored:
		// A new bucket (or an unreadable one): both fields at once.
		p.HSet(ctx, key, counterField, s.Counter, timestampField, s.Timestamp)
	default:
		if d := s.Counter - old.Counter; d != 0 {
			p.HIncrBy(ctx, key, counterField, d)
		}
		if d := s.Timestamp - old.Timestamp; d != 0 {
			p.HIncrBy(ctx, key, timestampField, d)
		}
	}
	if ttl >= 0 {
		p.PExpire(ctx, key, time.Duration(ceilMillis(ttl))*time.Millisecond)
	}
}

// readState reads a bucket's hash fields. A bucket that does not exist, or
// that does not hold two numbers or a sliding window, is empty, as in the
// script.
func readState(vals []any) (limit.State, bool) {
	if len(vals) != 3 {
		return limit.State{}, false
	}
	if w, ok := vals[2].(string); ok {
		return decodeWindow(w)
	}
	cs, cok := vals[0].(string)
	ts, tok := vals[1].(string)
	c, cerr := strconv.ParseInt(cs, 10, 64)
	t, terr := strconv.ParseInt(ts, 10, 64)
	if !cok || !tok || cerr != nil || terr != nil || c < 0 {
		return limit.State{}, false
	}
	return limit.State{Counter: c, Timestamp: t}, true
}
