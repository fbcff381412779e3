package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

var (
	//go:embed decide.lua
	decideSource string
	//go:embed undo.lua
	undoSource string
	//go:embed state.lua
	stateSource string
	//go:embed algorithms.lua
	algorithmsSource string
	//go:embed lease.lua
	leaseSource string

	decideScript = newScript(stateSource + algorithmsSource + decideSource)
	leaseScript  = newScript(stateSource + algorithmsSource + leaseSource)
	undoScript   = newScript(stateSource + undoSource)
)

// luaScript is a script and its SHA-1, by which EVALSHA names it.
type luaScript struct{ src, sha string }

func newScript(src string) luaScript {
	sum := sha1.Sum([]byte(src))
	return luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// scriptExec decides a slot's buckets in one script call.
type scriptExec struct{}

func (scriptExec) run(ctx context.Context, c *clients, w when, keys []string, buckets []limit.Bucket, results []limit.Result, before []limit.State) (int64, error) {
	return runRequests(ctx, c, w.at, keys, []scriptRequest{{at: -1, ref: w.ref, buckets: buckets, results: results, before: before}})
}

// scriptRequest is one request of a script call: its buckets, where their
// results go, and, if not nil, where their states before the charge go.
type scriptRequest struct {
	at      int64 // the time to decide at, or -1 for the call's
	ref     int64 // the service's clock, for calendar windows' periods (args.go)
	buckets []limit.Bucket
	results []limit.Result
	before  []limit.State
}

// runRequests decides requests in one script call, in order, each all or
// nothing on its own; keys are their buckets' keys in turn, in one slot.
//
// The script decides and charges; it returns each bucket's state as it
// read it, and runRequests decides those states again with
// limit.DecideAll, at the same instant, for the results: the figures are
// DecideAll's by construction, and the script returns 2 values per bucket
// instead of 7. The script's answer for each request must be DecideAll's,
// or the call fails: what it charged would not be what the results say.
func runRequests(ctx context.Context, c *clients, now int64, keys []string, reqs []scriptRequest) (int64, error) {
	vals, err := runScript(ctx, c, &decideScript, keys, decideArgs(now, keys, reqs))
	if err != nil {
		return 0, err
	}
	return decideReply(vals, reqs, len(keys))
}

// decideReply reads decide.lua's reply to requests of n buckets in all
// into their results, and returns the time decided at.
func decideReply(vals []int64, reqs []scriptRequest, n int) (int64, error) {
	if len(vals) < len(reqs)+2*n+1 {
		return 0, fmt.Errorf("redis script: %d values for %d buckets", len(vals), n)
	}
	at := vals[len(vals)-1]
	vals = vals[:len(vals)-1]
	var inline [8]limit.State
	states := inline[:0]
	if n > len(inline) {
		states = make([]limit.State, 0, n)
	}
	var err error
	for _, r := range reqs {
		if len(vals) == 0 {
			return 0, errors.New("redis script: too few values")
		}
		admitted := vals[0] == 1
		vals = vals[1:]
		st := states[len(states) : len(states)+len(r.buckets)]
		states = states[:len(states)+len(r.buckets)]
		for i, b := range r.buckets {
			if vals, err = scriptState(vals, b.Limit.Algorithm, &st[i]); err != nil {
				return 0, err
			}
		}
		t := at
		if r.at >= 0 {
			t = r.at
		}
		if limit.DecideAll(st, r.buckets, time.UnixMicro(t), r.results) != admitted {
			return 0, fmt.Errorf("redis script: its answer differs from limit.DecideAll's on the same state: the script (%.7s) and the service disagree", decideScript.sha)
		}
		if r.before != nil {
			for i, b := range r.buckets {
				r.before[i] = limit.Decide(st[i], b.Limit, time.UnixMicro(t), 0).State
			}
		}
	}
	if len(vals) != 0 {
		return 0, fmt.Errorf("redis script: %d values left over", len(vals))
	}
	return at, nil
}

// scriptState reads a bucket's state as decide.lua returns it into st, and
// returns the values after it: a counter and a timestamp, or for a sliding
// window its newest start, its number of counts and its counts (their sum
// as the counter, as decodeWindow reads it).
func scriptState(vals []int64, algo limit.Algorithm, st *limit.State) ([]int64, error) {
	if len(vals) < 2 {
		return nil, errors.New("redis script: too few values")
	}
	if algo != limit.SlidingWindow {
		*st = limit.State{Counter: vals[0], Timestamp: vals[1]}
		return vals[2:], nil
	}
	m := vals[1]
	if m < 0 || m > int64(len(vals)-2) {
		return nil, fmt.Errorf("redis script: %d counts of a sliding window", m)
	}
	*st = limit.State{Timestamp: vals[0]}
	if m > 0 {
		st.Counts = make([]int64, m)
		copy(st.Counts, vals[2:2+m])
		for _, c := range st.Counts {
			st.Counter += c
		}
	}
	return vals[2+m:], nil
}

func (scriptExec) undo(ctx context.Context, c *clients, now int64, keys []string, changes []change) ([]limit.State, int64, error) {
	a := newScriptArgs(1 + 6*len(changes))
	a.now(now)
	for _, ch := range changes {
		a.int(scriptAlgorithm(ch.limit))
		if ch.limit.IsCalendar() {
			// The start of the period the hits were charged in: a charge
			// leaves the state starting there (limit.Uncharge).
			a.int(ch.hits)
			a.int(ch.limit.FixedPeriod(ch.at).Start)
			a.int(0)
			a.int(0)
			a.int(0)
			continue
		}
		if ch.limit.Algorithm == limit.LeakyBucket {
			a.int(ch.after.Counter)
			a.int(ch.after.Timestamp)
			a.int(ch.before.Counter)
			a.int(ch.before.Timestamp)
			a.int(ceilMillis(ch.beforeTTL))
			continue
		}
		p, _ := params(ch.limit, ch.at)
		a.int(ch.hits)
		a.int(ch.at)
		a.int(p[1])
		a.int(max(p[2], 1))
		a.int(0)
	}
	vals, err := runScript(ctx, c, &undoScript, keys, a.strings())
	if err != nil {
		return nil, 0, err
	}
	if len(vals) != 2*len(changes)+1 {
		return nil, 0, fmt.Errorf("redis undo script: %d values for %d buckets", len(vals), len(changes))
	}
	states := make([]limit.State, len(changes))
	for i := range states {
		states[i] = limit.State{Counter: vals[2*i], Timestamp: vals[2*i+1]}
	}
	return states, vals[len(vals)-1], nil
}

func (scriptExec) read(ctx context.Context, p goredis.Pipeliner, key string) goredis.Cmder {
	return p.Get(ctx, key)
}

// state decodes a bucket as decide.lua loads it: load_window for a sliding
// window, load_state for the others, each empty for what it cannot read.
func (scriptExec) state(read goredis.Cmder, algo limit.Algorithm) limit.State {
	cmd, ok := read.(*goredis.StringCmd)
	if !ok || cmd.Err() != nil {
		return limit.State{}
	}
	decode := decodeState
	if algo == limit.SlidingWindow {
		decode = decodeWindow
	}
	st, _ := decode(cmd.Val())
	return st
}

// noRetry marks a command that must not be sent twice: a script whose
// reply was lost may have charged already. (go-redis's Cluster client would
// otherwise send it again after a network error.)
type noRetry struct{ *goredis.IntSliceCmd }

func (noRetry) NoRetry() bool { return true }

// runScript runs a script with EVALSHA, loading it with EVAL when Redis
// answers NOSCRIPT (a new or restarted server, or a Cluster node that has
// not seen it yet), never retrying.
func runScript(ctx context.Context, c *clients, s *luaScript, keys, args []string) ([]int64, error) {
	// The reply is read straight into integers (a generic Cmd would box
	// each one).
	cmdArgs := scriptCmdArgs(s, false, &scriptCall{keys: keys, args: args})
	ticket, err := c.allow(ctx, keys)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	var cmd *goredis.IntSliceCmd
	for try := 1; ; try++ {
		cmd = goredis.NewIntSliceCmd(ctx, cmdArgs...)
		err = c.process(ctx, noRetry{cmd})
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			cmdArgs[0], cmdArgs[1] = "eval", &s.src
			cmd = goredis.NewIntSliceCmd(ctx, cmdArgs...)
			err = c.process(ctx, noRetry{cmd})
		}
		// TRYAGAIN: a Cluster slot is moving, and some of the call's keys
		// have moved, others not. The script did not run, so it is sent
		// again, a moment later, while the call has time.
		if !goredis.IsTryAgainError(err) || try == tryAgainTimes || !sleepCtx(ctx, tryAgainPause) {
			break
		}
	}
	c.done(ctx, ticket, begin, err)
	if err != nil {
		return nil, fmt.Errorf("redis script: %w", err)
	}
	return cmd.Val(), nil
}

// tryAgainTimes bounds the sends of a script call that Redis answers
// TRYAGAIN (a slot being moved), tryAgainPause apart, within the call's
// own deadline: moving a slot's keys takes milliseconds.
const (
	tryAgainTimes = 50
	tryAgainPause = 2 * time.Millisecond
)

// sleepCtx sleeps for d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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
