package redis

import (
	"context"
	_ "embed"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

//go:embed decide.lua
var decideSource string

// decideScript is run with EVALSHA, and loaded with EVAL when Redis answers
// NOSCRIPT (a new or restarted server, or a Cluster node that has not seen
// it yet).
var decideScript = goredis.NewScript(decideSource)

// resultFields is the number of values the script returns per bucket.
const resultFields = 7

// scriptExec decides a slot's buckets in one script call.
type scriptExec struct{}

func (scriptExec) run(ctx context.Context, c goredis.UniversalClient, now int64, keys []string, buckets []leaky.Bucket, results []leaky.Result) error {
	args := make([]any, 1, 1+5*len(buckets))
	args[0] = ""
	if now >= 0 {
		args[0] = now
	}
	for _, b := range buckets {
		shadow := 0
		if b.Shadow {
			shadow = 1
		}
		args = append(args, b.Limit.Size, b.Limit.DripRate.Microseconds(), b.Limit.DripSize, b.Hits, shadow)
	}
	vals, err := decideScript.Run(ctx, c, keys, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("redis script: %w", err)
	}
	if len(vals) != resultFields*len(buckets) {
		return fmt.Errorf("redis script: %d values for %d buckets", len(vals), len(buckets))
	}
	for i := range buckets {
		v := vals[resultFields*i:]
		results[i] = leaky.Result{
			Admitted:  v[0] == 1,
			State:     leaky.State{Counter: v[1], Timestamp: v[2]},
			Remaining: v[3],
			Clear:     micros(v[4]),
			Reset:     micros(v[5]),
			TTL:       micros(v[6]),
		}
	}
	return nil
}
