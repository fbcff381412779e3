package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
)

// allow returns the breaker's ticket for a script call on keys, sent to
// their node (a Cluster's master of their slot; the one server
// otherwise), or an error wrapping breaker.ErrOpen when the node's breaker
// is open: the call is not sent, and the failure mode answers at once.
func (c *clients) allow(ctx context.Context, keys []string) (breaker.Ticket, error) {
	if c.breakers == nil {
		return breaker.Ticket{}, nil
	}
	node := c.node(ctx, keys)
	t, ok := c.breakers.Allow(node)
	if !ok {
		return t, fmt.Errorf("redis %s: %w", node, breaker.ErrOpen)
	}
	return t, nil
}

// node names the server a call on keys goes to.
func (c *clients) node(ctx context.Context, keys []string) string {
	switch conn := c.conn.(type) {
	case *goredis.ClusterClient:
		if len(keys) > 0 {
			if n, err := conn.MasterForKey(ctx, keys[0]); err == nil {
				return n.Options().Addr
			}
		}
		return "cluster"
	case *goredis.Client:
		return conn.Options().Addr
	}
	return "redis"
}

// done tells the node's breaker how the call that began at begin ended.
func (c *clients) done(ctx context.Context, t breaker.Ticket, begin time.Time, err error) {
	if c.breakers != nil {
		t.Done(outcome(ctx, begin, err))
	}
}

// minBudget is the least time a call must have had for its timeout to
// count against its node: Redis answers in far less, and a caller sending
// tiny deadlines must not trip the breaker for every caller.
const minBudget = 10 * time.Millisecond

// outcome is how a call ended, as the breaker counts it: any reply (an
// error reply too) is an answer; a timeout counts if the call had
// minBudget; anything else (a refused connection, a call given up) says
// nothing of whether the node answers.
func outcome(ctx context.Context, begin time.Time, err error) breaker.Outcome {
	var reply goredis.Error
	switch {
	case err == nil || errors.As(err, &reply):
		return breaker.Answered
	case timedOut(err):
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(begin) < minBudget {
			return breaker.Abandoned
		}
		return breaker.TimedOut
	}
	return breaker.Abandoned
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// BreakersOpen returns the nodes whose breaker is open now.
func (s *Store) BreakersOpen() []string {
	if s.breakers == nil {
		return nil
	}
	return s.breakers.Open()
}
