package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// part is the buckets of one slot, decided by one executor call.
type part struct {
	index   []int // positions in the request
	keys    []string
	buckets []limit.Bucket
	results []limit.Result
	before  []limit.State // each bucket before the charge, dripped to now
	now     int64         // the time it was decided at
	err     error
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

// undoTimeout bounds the undo of a request rejected in another slot: it
// must run even if the call has just ended, but not hang.
const undoTimeout = time.Second

// applySlots decides a request whose buckets span several slots: one call
// per slot, in parallel. If a slot rejects or fails, what the other slots
// charged is undone, so a rejected request still charges nothing.
func (s *Store) applySlots(ctx context.Context, c *clients, at int64, keys []string, buckets []limit.Bucket, results []limit.Result) error {
	var parts []*part
	slots := map[uint16]*part{}
	for i, k := range keys {
		sl := slot(k)
		p := slots[sl]
		if p == nil {
			p = &part{}
			slots[sl] = p
			parts = append(parts, p)
		}
		p.add(i, k, buckets[i])
	}
	parallel(parts, func(p *part) {
		p.results, p.before = make([]limit.Result, len(p.buckets)), make([]limit.State, len(p.buckets))
		p.now, p.err = s.exec.run(ctx, c, at, p.keys, p.buckets, p.results, p.before)
	})

	var failed error
	rejected := false
	for _, p := range parts {
		switch {
		case p.err != nil:
			failed = errors.Join(failed, p.err)
		case !p.admitted():
			rejected = true
		}
		for j, i := range p.index {
			if p.err != nil {
				// Unknown, and not what rejected the request.
				results[i] = limit.Result{Admitted: true}
				continue
			}
			results[i] = p.results[j]
		}
	}
	if failed == nil && !rejected {
		return nil
	}

	undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	var undos []*undo
	for _, p := range parts {
		if p.err == nil && p.admitted() {
			if u := undoOf(p); u != nil {
				undos = append(undos, u)
			}
		}
	}
	parallel(undos, func(u *undo) { u.states, u.now, u.err = s.exec.undo(undoCtx, c, at, u.keys, u.changes) })
	var windows []int // sliding windows undone, whose counts the undo does not return
	for _, u := range undos {
		if u.err != nil {
			s.log.Error("redis store: undoing the charge of a rejected request failed: its buckets stay charged until they drain",
				"keys", u.keys, "err", u.err)
			continue
		}
		for j, i := range u.index {
			b := buckets[i]
			if b.Limit.Algorithm == limit.SlidingWindow {
				// Until read again below: the charged result, less the charge.
				results[i].Remaining = min(results[i].Remaining+u.changes[j].hits, b.Limit.Size)
				windows = append(windows, i)
				continue
			}
			r := limit.Decide(u.states[j], b.Limit, time.UnixMicro(u.now), 0)
			r.Admitted = true // the bucket had room; the request was refused elsewhere
			results[i] = r
		}
	}
	s.rereadWindows(undoCtx, c, at, windows, keys, buckets, results)
	if rejected {
		return nil // rejected for certain, whatever else failed
	}
	return failed
}

// rereadWindows reads the sliding windows at these indexes again once
// undone, for their figures as they stay (the time to clear, above all).
// If the read fails, the results keep what the undo alone tells.
func (s *Store) rereadWindows(ctx context.Context, c *clients, at int64, windows []int, keys []string, buckets []limit.Bucket, results []limit.Result) {
	if len(windows) == 0 {
		return
	}
	wk, wb := make([]string, len(windows)), make([]limit.Bucket, len(windows))
	for n, i := range windows {
		wk[n], wb[n] = keys[i], buckets[i]
	}
	states := make([]limit.State, len(windows))
	now, err := s.read(ctx, c, at, wk, wb, states)
	if err != nil {
		return
	}
	for n, i := range windows {
		r := limit.Decide(states[n], wb[n].Limit, time.UnixMicro(now), 0)
		r.Admitted = true // the window had room; the request was refused elsewhere
		results[i] = r
	}
}

// undo is the changes one charged part made, to take back.
type undo struct {
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
