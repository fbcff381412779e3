package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// Board is where replicas exchange their records: for each level, one
// record per replica (a hash field on Redis, RedisBoard).
type Board interface {
	// Exchange replaces replica's record on each shelf's level with the
	// shelf's (none removes it), valid for the shelf's TTL, and returns
	// every other replica's live record on those levels.
	Exchange(ctx context.Context, now time.Time, replica string, shelves []Shelf) (map[string][]Record, error)
}

// Shelf is one replica's record of one level, as a Board keeps it.
type Shelf struct {
	Level  string
	TTL    time.Duration
	Record *Record // nil: the replica has no subscriber there any more
}

// DefaultRefresh is how often a SharedRegistry exchanges a level with the
// other replicas at most: often enough that a share moves within one of
// Envoy's 5 s reports, and rarely enough that Redis works per level and
// replica, not per level and Envoy.
const DefaultRefresh = time.Second

// SharedRegistry is the Registry of replicas that share their subscribers
// through a Board. It keeps this replica's own subscribers in process (a
// MemoryRegistry), so that a stream sees its replica's other streams at
// once, beside the other replicas' records; it exchanges a level with the
// board when it was last exchanged refresh ago or more, or gained a
// subscriber here, sending one record of all of this replica's
// subscribers there, bounded in size. It is safe for concurrent use.
type SharedRegistry struct {
	replica string
	board   Board
	refresh time.Duration
	local   *MemoryRegistry

	mu   sync.Mutex
	seen map[string]*seenLevel
	last time.Time // the latest time a publish gave: Withdraw's clock
	// hold is the latest entries' TTL a publish gave: how long a peer's
	// record is held when an exchange after a failed one does not read it
	// (levelState.setOthers).
	hold  time.Duration
	swept time.Time
	round uint64 // publishes so far, to look at each level once in one
}

// seenLevel is when a level was last exchanged.
type seenLevel struct {
	at time.Time // zero until the first exchange answers
	// failing: its last exchange failed (the one on its way may answer).
	failing bool
	busy    bool // an exchange of it is on its way
	// again: it changed here (a stream left, or joined) while busy: the
	// exchange on its way sends it once more when it ends, so a fleet
	// leaving together costs two exchanges, not one each.
	again bool
	// round is the last publish that looked at it.
	round uint64
}

// NewSharedRegistry returns a registry exchanging through board at most
// once per refresh a level (0: at every publish), under a name of its
// own, and dividing a level anew at most once every every.
func NewSharedRegistry(board Board, refresh, every time.Duration) *SharedRegistry {
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	return &SharedRegistry{replica: hex.EncodeToString(id), board: board, refresh: refresh,
		local: NewMemoryRegistry(every), seen: map[string]*seenLevel{}}
}

// Publish implements Registry.
func (r *SharedRegistry) Publish(ctx context.Context, now time.Time, ttl time.Duration, entries []Entry) error {
	joined := r.local.record(now, ttl, entries)
	r.mu.Lock()
	if now.After(r.last) {
		r.last = now
	}
	// The longest TTL any stream gives: what a peer's record may live.
	r.hold = max(r.hold, ttl)
	r.round++
	var due, levels []string
	for i := range entries {
		level := entries[i].Level
		s := r.seen[level]
		if s == nil {
			s = &seenLevel{}
			r.seen[level] = s
		}
		if s.round == r.round {
			continue // a level of several entries: looked at once
		}
		s.round = r.round
		levels = append(levels, level)
		if s.busy && joined[level] {
			s.again = true
		}
		// A level being exchanged by another call is read from the last
		// exchange, unless there was none. One that gained a subscriber
		// here goes at once: the others must count it before they hand
		// out its share.
		if s.at.IsZero() || (!s.busy && (joined[level] || now.Sub(s.at) >= r.refresh)) {
			s.busy = true
			due = append(due, level)
		}
	}
	r.sweep(now)
	r.mu.Unlock()
	var err error
	if len(due) > 0 {
		err = r.exchange(ctx, now, due)
	}
	// Stale are the levels whose last exchange failed: this publish's, or
	// one before it for a level being exchanged again meanwhile.
	if since, stale := r.staleSince(levels); stale {
		if err == nil {
			err = errExchangeFailing
		}
		if !r.local.divided(levels) {
			since = time.Time{} // a level never divided with fresh records
		}
		err = &StaleError{Since: since, Err: err}
	}
	r.local.shares(now, entries)
	return err
}

// errExchangeFailing is a level's last exchange failed, another on its way.
var errExchangeFailing = errors.New("the last exchange failed; another is on its way")

// staleSince reports whether a level's last exchange failed, and the
// oldest last successful exchange of those (zero if one never had one).
func (r *SharedRegistry) staleSince(levels []string) (since time.Time, stale bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, level := range levels {
		s := r.seen[level]
		if s == nil || !s.failing {
			continue
		}
		switch {
		case s.at.IsZero():
			return time.Time{}, true
		case !stale || s.at.Before(since):
			since = s.at
		}
		stale = true
	}
	return since, stale
}

// exchange sends this replica's records of levels to the board and keeps
// the others' there. Those that changed here meanwhile are sent once more
// in the background, so that no caller's answer waits for a stream of
// joins or withdrawals it has no part in.
func (r *SharedRegistry) exchange(ctx context.Context, now time.Time, levels []string) error {
	again, err := r.exchangeOnce(ctx, now, levels)
	if len(again) > 0 {
		go r.exchangeAgain(again)
	}
	return err
}

// againTimeout bounds an exchange made again in the background: the
// longest a report's own calls may take.
const againTimeout = 5 * time.Second

// exchangeAgain exchanges levels until none changed while it did.
func (r *SharedRegistry) exchangeAgain(levels []string) {
	for len(levels) > 0 {
		r.mu.Lock()
		now := r.last
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), againTimeout)
		levels, _ = r.exchangeOnce(ctx, now, levels)
		cancel()
	}
}

// exchangeOnce makes one exchange of levels, marked busy, and returns
// those that changed here while it was on its way, still busy: the caller
// exchanges them again.
func (r *SharedRegistry) exchangeOnce(ctx context.Context, now time.Time, levels []string) (again []string, err error) {
	got, err := r.board.Exchange(ctx, now, r.replica, r.local.records(levels, now))
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if err == nil {
		r.local.setOthers(got, now, hold)
	} else {
		r.local.freeze(levels)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, level := range levels {
		s := r.seen[level]
		if s == nil { // swept meanwhile
			s = &seenLevel{}
			r.seen[level] = s
		}
		if err == nil {
			s.at = now
		}
		s.failing = err != nil
		if err == nil && s.again {
			s.again = false
			again = append(again, level)
			continue
		}
		s.busy, s.again = false, false
	}
	return again, err
}

// Withdraw implements Registry: the instance leaves this replica's
// subscribers, and the levels' records are exchanged at once (or, those
// being exchanged, right after), so the other replicas see it gone at
// their next exchange.
func (r *SharedRegistry) Withdraw(ctx context.Context, instance string, levels []string) error {
	if len(levels) == 0 {
		return nil
	}
	_ = r.local.Withdraw(ctx, instance, levels) // in process: no error
	r.mu.Lock()
	now := r.last
	var due []string
	for _, level := range levels {
		s := r.seen[level]
		if s == nil {
			s = &seenLevel{}
			r.seen[level] = s
		}
		if s.busy {
			s.again = true
			continue
		}
		s.busy = true
		due = append(due, level)
	}
	r.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	return r.exchange(ctx, now, due)
}

// Summary implements Registry.
func (r *SharedRegistry) Summary(level string, top int) (LevelSummary, bool) {
	return r.local.Summary(level, top)
}

// sweep forgets, once per refresh at most, the levels not exchanged for
// five minutes (longer than any entry lives): those no stream here
// publishes on any more. Called with r.mu held.
func (r *SharedRegistry) sweep(now time.Time) {
	const forget = 5 * time.Minute
	if now.Sub(r.swept) < max(r.refresh, time.Second) {
		return
	}
	r.swept = now
	for level, s := range r.seen {
		if !s.busy && now.Sub(s.at) > forget {
			delete(r.seen, level)
		}
	}
}
