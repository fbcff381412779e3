package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

var (
	//go:embed decide.lua
	decideSource string
	//go:embed undo.lua
	undoSource string
	//go:embed state.lua
	stateSource string

	decideScript = newScript(stateSource + decideSource)
	undoScript   = newScript(stateSource + undoSource)
)

// luaScript is a script and its SHA-1, by which EVALSHA names it.
type luaScript struct{ src, sha string }

func newScript(src string) luaScript {
	sum := sha1.Sum([]byte(src))
	return luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// resultFields is the number of values decide.lua returns per bucket, not
// counting the state before the charge.
const resultFields = 7

// scriptExec decides a slot's buckets in one script call.
type scriptExec struct{}

func (scriptExec) run(ctx context.Context, c *clients, now int64, keys []string, buckets []leaky.Bucket, results []leaky.Result, before []leaky.State) (int64, error) {
	args := make([]any, 2, 2+5*len(buckets))
	args[0], args[1] = nowArg(now), "0"
	fields := resultFields
	if before != nil {
		args[1], fields = "1", resultFields+2
	}
	for _, b := range buckets {
		shadow := 0
		if b.Shadow {
			shadow = 1
		}
		args = append(args, b.Limit.Size, b.Limit.DripRate.Microseconds(), b.Limit.DripSize, b.Hits, shadow)
	}
	vals, err := runScript(ctx, c, decideScript, keys, args)
	if err != nil {
		return 0, err
	}
	if len(vals) != fields*len(buckets)+1 {
		return 0, fmt.Errorf("redis script: %d values for %d buckets", len(vals), len(buckets))
	}
	for i := range buckets {
		v := vals[fields*i:]
		results[i] = leaky.Result{
			Admitted:  v[0] == 1,
			State:     leaky.State{Counter: v[1], Timestamp: v[2]},
			Remaining: v[3],
			Clear:     micros(v[4]),
			Reset:     micros(v[5]),
			TTL:       micros(v[6]),
		}
		if before != nil {
			before[i] = leaky.State{Counter: v[7], Timestamp: v[8]}
		}
	}
	return vals[len(vals)-1], nil
}

func (scriptExec) undo(ctx context.Context, c *clients, now int64, keys []string, changes []change) ([]leaky.State, int64, error) {
	args := make([]any, 1, 1+5*len(changes))
	args[0] = nowArg(now)
	for _, ch := range changes {
		args = append(args, ch.after.Counter, ch.after.Timestamp, ch.before.Counter, ch.before.Timestamp, ceilMillis(ch.beforeTTL))
	}
	vals, err := runScript(ctx, c, undoScript, keys, args)
	if err != nil {
		return nil, 0, err
	}
	if len(vals) != 2*len(changes)+1 {
		return nil, 0, fmt.Errorf("redis undo script: %d values for %d buckets", len(vals), len(changes))
	}
	states := make([]leaky.State, len(changes))
	for i := range states {
		states[i] = leaky.State{Counter: vals[2*i], Timestamp: vals[2*i+1]}
	}
	return states, vals[len(vals)-1], nil
}

func nowArg(now int64) any {
	if now < 0 {
		return ""
	}
	return now
}

// noRetry marks a command that must not be sent twice: a script whose
// reply was lost may have charged already. (go-redis's Cluster client would
// otherwise send it again after a network error.)
type noRetry struct{ *goredis.Cmd }

func (noRetry) NoRetry() bool { return true }

// runScript runs a script with EVALSHA, loading it with EVAL when Redis
// answers NOSCRIPT (a new or restarted server, or a Cluster node that has
// not seen it yet), never retrying.
func runScript(ctx context.Context, c *clients, s luaScript, keys []string, args []any) ([]int64, error) {
	call := func(name, script string) (*goredis.Cmd, error) {
		cmdArgs := make([]any, 0, 3+len(keys)+len(args))
		cmdArgs = append(cmdArgs, name, script, len(keys))
		for _, k := range keys {
			cmdArgs = append(cmdArgs, k)
		}
		cmd := goredis.NewCmd(ctx, append(cmdArgs, args...)...)
		return cmd, c.process(ctx, noRetry{cmd})
	}
	cmd, err := call("evalsha", s.sha)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		cmd, err = call("eval", s.src)
	}
	if err != nil {
		return nil, fmt.Errorf("redis script: %w", err)
	}
	vals, err := cmd.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redis script: %w", err)
	}
	return vals, nil
}

// process sends cmd, in the next batch if calls are batched, and waits for
// its reply or the end of ctx. A batched call whose ctx ends is abandoned,
// not taken back: Redis may still run it (the lost reply of the package
// documentation).
func (c *clients) process(ctx context.Context, cmd goredis.Cmder) error {
	if c.batch == nil {
		return c.conn.Process(ctx, cmd)
	}
	// The batch does not look at the call's context, so one that has ended
	// must not be queued.
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.batch.Submit(ctx, cmd).WaitContext(ctx)
}
