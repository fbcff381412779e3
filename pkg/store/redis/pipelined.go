package redis

import (
	"context"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// scriptCall is one call of a script whose reply is not only integers:
// its keys, all in one slot, and arguments; then its reply or error.
type scriptCall struct {
	keys, args []string
	reply      []any
	err        error
}

// runPipelined runs one script call per element of calls, all on one
// node (their keys in one slot), in one pipeline: one round trip, and
// each call's own time on Redis, which serves others between two calls.
// Like runScript, it loads the script with EVAL where Redis answers
// NOSCRIPT, sends again the calls answered TRYAGAIN (a Cluster slot
// moving), and counts the round trip on the node's breaker. It bypasses
// the store's autopipeliner: the calls are already batched.
//
// Unlike decide's, these calls may be sent twice (a publish repeated
// writes the same entries), so they are not marked noRetry.
func runPipelined(ctx context.Context, c *clients, s *luaScript, calls []*scriptCall) {
	if len(calls) == 0 {
		return
	}
	ticket, err := c.allow(ctx, calls[0].keys)
	if err != nil {
		for _, call := range calls {
			call.err = err
		}
		return
	}
	begin := time.Now()
	pending, eval := calls, false
	for try := 1; ; try++ {
		cmds := make([]*goredis.SliceCmd, len(pending))
		p := c.conn.Pipeline()
		for i, call := range pending {
			cmds[i] = goredis.NewSliceCmd(ctx, scriptCmdArgs(s, eval, call)...)
			_ = p.Process(ctx, cmds[i]) // queued; its error is the command's, read below
		}
		_, _ = p.Exec(ctx)
		var again []*scriptCall
		reload, tryAgain := false, false
		for i, call := range pending {
			call.reply, call.err = cmds[i].Val(), cmds[i].Err()
			switch {
			case call.err == nil:
			case !eval && strings.HasPrefix(call.err.Error(), "NOSCRIPT"):
				again, reload = append(again, call), true
			case goredis.IsTryAgainError(call.err):
				again, tryAgain = append(again, call), true
			}
		}
		if len(again) == 0 || try == tryAgainTimes || (tryAgain && !sleepCtx(ctx, tryAgainPause)) {
			break
		}
		// Once Redis lacks the script, every call sent again is an EVAL,
		// which loads it.
		pending, eval = again, eval || reload
	}
	var first error
	for _, call := range calls {
		if call.err != nil {
			first = call.err
			break
		}
	}
	c.done(ctx, ticket, begin, first)
}

// scriptCmdArgs returns the command of a call: EVALSHA, or EVAL with the
// source, then the number of keys, the keys and the arguments, as
// pointers (an interface holds one without copying the string).
func scriptCmdArgs(s *luaScript, eval bool, call *scriptCall) []any {
	args := make([]any, 0, 3+len(call.keys)+len(call.args))
	if eval {
		args = append(args, "eval", &s.src)
	} else {
		args = append(args, "evalsha", &s.sha)
	}
	args = append(args, len(call.keys))
	for i := range call.keys {
		args = append(args, &call.keys[i])
	}
	for i := range call.args {
		args = append(args, &call.args[i])
	}
	return args
}
