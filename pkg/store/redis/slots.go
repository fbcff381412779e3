package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// part is buckets of one slot decided by one executor call: all of them,
// or maxCallBuckets of a request that has more.
type part struct {
	index   []int // positions in the request
	keys    []string
	buckets []limit.Bucket
	results []limit.Result
	before  []limit.State // each bucket before the charge, dripped to now
	now     int64         // the time it was decided at
	err     error
	sent    bool // a call was made
	peek    bool // sent once the request was rejected: charged only what charges always
}

func (p *part) add(i int, key string, b limit.Bucket) {
	p.index = append(p.index, i)
	p.keys = append(p.keys, key)
	p.buckets = append(p.buckets, b)
}

// admitted reports whether every bucket of the part not in shadow mode
// admitted its hits: the part was charged.
func (p *part) admitted() bool {
	for i, r := range p.results {
		if !r.Admitted && !p.buckets[i].Shadow {
			return false
		}
	}
	return true
}

// undoTimeout bounds each undo call of a request rejected in another
// part, and the read of its sliding windows after: it must run even if
// the request's call has just ended, but not hang.
const undoTimeout = time.Second

// applySlots decides a request that one call cannot: its buckets span
// several slots, or both Redis servers, or more than maxCallBuckets. Each
// place's buckets go in calls of at most maxCallBuckets, in turn, and the
// places of a server in parallel (decideRun); the per-second Redis's
// first, then the first Redis's, so that a request a per-second limit
// refuses (the tighter, as a rule) only peeks at the others, and leaves
// nothing there for other requests to find charged until it is undone.
// If a part rejects or fails, what the other parts charged is undone, on
// whichever server they were charged, so a rejected request still charges
// nothing (but what charges always).
func (s *Store) applySlots(ctx context.Context, at when, keys []string, buckets []limit.Bucket, results []limit.Result) error {
	runs, places := s.split(keys, buckets)
	cs := make([]*clients, len(runs))
	byServer := make([][]int, len(s.servers))
	for r, p := range places {
		cs[r] = s.clientsAt(p)
		byServer[p.server()] = append(byServer[p.server()], r)
	}
	var flags runFlags
	for n := len(byServer) - 1; n >= 0; n-- {
		rs := byServer[n]
		parallelN(len(rs), func(i int) { s.decideRun(ctx, cs[rs[i]], at, runs[rs[i]], &flags) })
	}

	var failed error
	rejected, unsent := false, false
	for _, run := range runs {
		for _, p := range run {
			switch {
			case !p.sent:
				unsent = true
			case p.err != nil:
				failed = errors.Join(failed, p.err)
			case !p.admitted():
				rejected = true
			}
			for j, i := range p.index {
				if !p.sent || p.err != nil {
					// Unknown, and not what rejected the request.
					results[i] = limit.Result{Admitted: true}
					continue
				}
				results[i] = p.results[j]
			}
		}
	}
	if failed == nil && !rejected {
		return nil
	}

	var undos [][]*undo // per place, in turn
	for r, run := range runs {
		var us []*undo
		for _, p := range run {
			if p.sent && p.err == nil && !p.peek && p.admitted() {
				if u := undoOf(p); u != nil {
					u.c = cs[r]
					us = append(us, u)
				}
			}
		}
		if len(us) > 0 {
			undos = append(undos, us)
		}
	}
	parallel(undos, func(run []*undo) { s.undoRun(ctx, run[0].c, at.at, run) })
	var windows []int // sliding windows undone, whose counts the undo does not return
	for _, run := range undos {
		for _, u := range run {
			windows = undoneResults(u, buckets, results, windows)
		}
	}
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	s.rereadWindows(readCtx, at.at, windows, keys, buckets, results)
	if rejected && !unsent {
		// Rejected for certain, whatever else failed. (Parts not sent, after
		// a failure, leave their figures unknown and what charges always
		// uncharged: the request fails.)
		return nil
	}
	return failed
}

// undoRun takes back the charges of one slot's parts, in turn, as they
// were made (decideRun). It stops at the first undo that fails: Redis is
// failing, and the others would only wait out their time too.
func (s *Store) undoRun(ctx context.Context, c *clients, at int64, run []*undo) {
	for k, u := range run {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		u.states, u.now, u.err = s.exec.undo(uctx, c, at, u.keys, u.changes)
		cancel()
		if u.err == nil {
			continue
		}
		left := 0
		for _, v := range run[k:] {
			v.err = u.err
			left += len(v.keys)
		}
		s.log.Error("redis store: undoing the charge of a rejected request failed: its buckets stay charged until they drain",
			"buckets", left, "first", u.keys[0], "err", u.err)
		return
	}
}

// undoneResults writes into results what the undo u left, if it was made, and
// returns windows with the sliding windows it undid, to be read again.
func undoneResults(u *undo, buckets []limit.Bucket, results []limit.Result, windows []int) []int {
	if u.err != nil {
		return windows
	}
	for j, i := range u.index {
		b := buckets[i]
		if b.Limit.Algorithm == limit.SlidingWindow {
			// Until read again: the charged result, less the charge.
			results[i].Remaining = min(results[i].Remaining+u.changes[j].hits, b.Limit.Size)
			windows = append(windows, i)
			continue
		}
		r := limit.Decide(u.states[j], b.Limit, time.UnixMicro(u.now), 0)
		r.Admitted = true // the bucket had room; the request was refused elsewhere
		results[i] = r
	}
	return windows
}

// rereadWindows reads the sliding windows at these indexes again once
// undone, for their figures as they stay (the time to clear, above all).
// If the read fails, the results keep what the undo alone tells.
func (s *Store) rereadWindows(ctx context.Context, at int64, windows []int, keys []string, buckets []limit.Bucket, results []limit.Result) {
	if len(windows) == 0 {
		return
	}
	wk, wb := make([]string, len(windows)), make([]limit.Bucket, len(windows))
	for n, i := range windows {
		wk[n], wb[n] = keys[i], buckets[i]
	}
	states := make([]limit.State, len(windows))
	nows, err := s.readAll(ctx, at, wk, wb, states)
	if err != nil {
		return
	}
	for n, i := range windows {
		r := limit.Decide(states[n], wb[n].Limit, time.UnixMicro(nows[n]), 0)
		r.Admitted = true // the window had room; the request was refused elsewhere
		results[i] = r
	}
}

// undo is the changes one charged part made, to take back.
type undo struct {
	c       *clients // of the server the part was charged on
	index   []int
	keys    []string
	changes []change
	states  []limit.State
	now     int64
	err     error
}

// undoOf returns the undo of what p changed, or nil.
func undoOf(p *part) *undo {
	u := &undo{}
	for j, r := range p.results {
		b := p.buckets[j]
		ch := change{limit: b.Limit}
		switch {
		case b.Always:
			continue // charged whatever the answer: nothing to undo
		case b.Limit.Algorithm != limit.LeakyBucket:
			if !r.Admitted || b.Hits == 0 {
				continue // not charged (a shadow window without room), or a peek
			}
			ch.hits, ch.at = b.Hits, p.now
		case r.State.Counter == p.before[j].Counter && r.State.Timestamp == p.before[j].Timestamp:
			continue // not charged (a shadow bucket without room), or a peek
		default:
			ch.before, ch.after = p.before[j], r.State
			ch.beforeTTL = limit.Decide(p.before[j], b.Limit, time.UnixMicro(p.now), 0).TTL
		}
		u.index = append(u.index, p.index[j])
		u.keys = append(u.keys, p.keys[j])
		u.changes = append(u.changes, ch)
	}
	if len(u.keys) == 0 {
		return nil
	}
	return u
}

func parallel[T any](items []T, f func(T)) {
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() { f(it) })
	}
	wg.Wait()
}

// ceilMillis rounds up to whole milliseconds, as PX takes them.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
