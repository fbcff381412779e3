package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// intCall is one script call whose reply is integers: the script, its
// keys (in one slot) and arguments; then its reply or error.
type intCall struct {
	script     *luaScript
	keys, args []string
	vals       []int64
	err        error
}

// runTogether makes script calls to one place in one round trip (a
// pipeline): on a busy machine, what Redis spends to wake, read and write
// for a round trip costs it more than a small call's own work, so calls
// that go together cost it about one call's share. Like runScript, it
// never sends a call twice but where Redis did not run it: a call
// answered NOSCRIPT or TRYAGAIN goes again on its own (runScript).
func runTogether(ctx context.Context, c *clients, calls []*intCall) {
	if len(calls) == 1 {
		calls[0].vals, calls[0].err = runScript(ctx, c, calls[0].script, calls[0].keys, calls[0].args)
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
	cmds := make([]*goredis.IntSliceCmd, len(calls))
	p := c.conn.Pipeline()
	for i, call := range calls {
		cmds[i] = goredis.NewIntSliceCmd(ctx, scriptCmdArgs(call.script, false, &scriptCall{keys: call.keys, args: call.args})...)
		_ = p.Process(ctx, noRetry{cmds[i]}) // queued; its error is the command's, read below
	}
	_, err = p.Exec(ctx)
	c.done(ctx, ticket, begin, err)
	for i, call := range calls {
		call.vals, call.err = cmds[i].Val(), cmds[i].Err()
		if call.err != nil {
			if strings.HasPrefix(call.err.Error(), "NOSCRIPT") || goredis.IsTryAgainError(call.err) {
				call.vals, call.err = runScript(ctx, c, call.script, call.keys, call.args)
				continue
			}
			call.err = fmt.Errorf("redis script: %w", call.err)
		}
	}
}
