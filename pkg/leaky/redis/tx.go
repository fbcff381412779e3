package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
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
// again, by leaky.DecideAll. An attempt is three round trips: WATCH, a
// pipeline that reads the server's TIME and the buckets, and MULTI/EXEC.
type txExec struct{}

// txPrefix follows the store's prefix in transaction-mode keys, which hold
// hashes, so they never meet the script mode's strings (whose keys have the
// '{' right after the prefix).
const txPrefix = "tx:"

// The fields of a bucket's hash.
const (
	counterField   = "c"
	timestampField = "t"
)

func (e txExec) run(ctx context.Context, c goredis.UniversalClient, now int64, keys []string, buckets []leaky.Bucket, results []leaky.Result) error {
	for attempt := 0; ; attempt++ {
		err := c.Watch(ctx, func(tx *goredis.Tx) error {
			return e.attempt(ctx, tx, now, keys, buckets, results)
		}, keys...)
		if !errors.Is(err, goredis.TxFailedErr) {
			if err != nil {
				return fmt.Errorf("redis transaction: %w", err)
			}
			return nil
		}
		// Another request changed a bucket first: decide again, after a
		// short random pause so that contenders spread out.
		pause := time.Duration(rand.Int64N(int64(min(attempt+1, 20)) * int64(50*time.Microsecond)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis transaction: gave up after %d conflicts: %w", attempt+1, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// attempt reads the buckets under WATCH, decides, and writes the changes in
// MULTI/EXEC, which fails with TxFailedErr if a watched key changed.
func (e txExec) attempt(ctx context.Context, tx *goredis.Tx, now int64, keys []string, buckets []leaky.Bucket, results []leaky.Result) error {
	var timeCmd *goredis.TimeCmd
	reads := make([]*goredis.SliceCmd, len(keys))
	_, err := tx.Pipelined(ctx, func(p goredis.Pipeliner) error {
		timeCmd = p.Time(ctx)
		for i, k := range keys {
			reads[i] = p.HMGet(ctx, k, counterField, timestampField)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if now < 0 {
		t, err := timeCmd.Result()
		if err != nil {
			return err
		}
		now = t.UnixMicro()
	}
	states := make([]leaky.State, len(buckets))
	stored := make([]bool, len(buckets))
	for i, k := range keys {
		if states[i], stored[i], err = readState(k, reads[i].Val()); err != nil {
			return err
		}
	}

	admitted := leaky.DecideAll(states, buckets, time.UnixMicro(now), results)
	_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		if !admitted {
			// Nothing to write, but EXEC still checks that the state read
			// was current: a decision on a stale read is made again.
			p.Ping(ctx)
			return nil
		}
		for i, r := range results {
			k := keys[i]
			ttl := (r.TTL + time.Millisecond - 1).Truncate(time.Millisecond)
			switch {
			case r.TTL <= 0:
				if stored[i] {
					p.Del(ctx, k) // empty: nothing to keep
				}
				continue
			case !stored[i]:
				// The first request of an empty bucket sets both fields.
				p.HSet(ctx, k, counterField, r.State.Counter, timestampField, r.State.Timestamp)
			default:
				if d := r.State.Counter - states[i].Counter; d != 0 {
					p.HIncrBy(ctx, k, counterField, d)
				}
				if d := r.State.Timestamp - states[i].Timestamp; d != 0 {
					p.HIncrBy(ctx, k, timestampField, d)
				}
			}
			p.PExpire(ctx, k, ttl)
		}
		return nil
	})
	return err
}

// readState reads a bucket's hash fields; stored is false when the bucket
// does not exist (or holds only one field, half-written by hand).
func readState(key string, vals []any) (s leaky.State, stored bool, err error) {
	if len(vals) != 2 || vals[0] == nil || vals[1] == nil {
		return leaky.State{}, false, nil
	}
	c, cerr := strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
	t, terr := strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
	if cerr != nil || terr != nil {
		return leaky.State{}, false, fmt.Errorf("bucket %s holds %v, not two numbers", key, vals)
	}
	return leaky.State{Counter: c, Timestamp: t}, true, nil
}
