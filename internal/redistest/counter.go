package redistest

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// Counter is a client hook that counts what the client sends: Trips round
// trips (a command, or a whole pipeline) and Cmds commands.
type Counter struct{ Trips, Cmds atomic.Int64 }

// Reset sets both counts to zero.
func (c *Counter) Reset() {
	c.Trips.Store(0)
	c.Cmds.Store(0)
}

func (c *Counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *Counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.Trips.Add(1)
		c.Cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *Counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.Trips.Add(1)
		c.Cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
