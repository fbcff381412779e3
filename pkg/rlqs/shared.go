package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// Board is where replicas exchange their subscribers: for each level, one
// record per replica holding all of its entries there (a hash field on
// Redis, RedisBoard).
type Board interface {
	// Exchange replaces replica's record on each shelf's level with the
	// shelf (an empty one removes it), valid for the shelf's TTL, and
	// returns every other replica's live entries on those levels.
	Exchange(ctx context.Context, now time.Time, replica string, shelves []Shelf) (map[string][]Entry, error)
}

// Shelf is one replica's entries on one level, as a Board keeps them.
type Shelf struct {
	Level   string
	TTL     time.Duration
	Entries []Entry
}

// DefaultRefresh is how often a SharedRegistry exchanges a level with the
// other replicas at most: often enough that a share moves within one of
// Envoy's 5 s reports, and rarely enough that Redis works per level and
// replica, not per level and Envoy (50 Envoys reporting every second cost
// it 50 reads of 50 entries a level each second otherwise).
const DefaultRefresh = time.Second

// SharedRegistry is the Registry of replicas that share their subscribers
// through a Board: it keeps this replica's own entries in process (a
// MemoryRegistry), so that a stream sees its replica's other streams at
// once, and exchanges a level with the board when it was last exchanged
// refresh ago or more, or gained a subscriber here, as one record of all
// of this replica's entries there. Between two exchanges a publish reads the other replicas' entries
// from the last. It is safe for concurrent use.
type SharedRegistry struct {
	replica string
	board   Board
	refresh time.Duration
	local   *MemoryRegistry

	mu    sync.Mutex
	seen  map[string]*seenLevel
	last  time.Time // the latest time a publish gave: Withdraw's clock
	swept time.Time
}

// seenLevel is what the last exchange of a level read: the other
// replicas' entries.
type seenLevel struct {
	others []Entry
	at     time.Time // when; zero until the first exchange answers
	busy   bool      // an exchange of it is on its way
}

// NewSharedRegistry returns a registry exchanging through board at most
// once per refresh a level (0: at every publish), under a name of its own.
func NewSharedRegistry(board Board, refresh time.Duration) *SharedRegistry {
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	return &SharedRegistry{replica: hex.EncodeToString(id), board: board, refresh: refresh,
		local: NewMemoryRegistry(), seen: map[string]*seenLevel{}}
}

// Publish implements Registry.
func (r *SharedRegistry) Publish(ctx context.Context, now time.Time, ttl time.Duration, entries []Entry) (map[string][]Entry, error) {
	mine, joined := r.local.publish(now, ttl, entries)
	r.mu.Lock()
	if now.After(r.last) {
		r.last = now
	}
	var due []string
	for level := range mine {
		s := r.seen[level]
		if s == nil {
			s = &seenLevel{}
			r.seen[level] = s
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
	if len(due) > 0 {
		if err := r.exchange(ctx, now, due); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for level, es := range mine {
		if s := r.seen[level]; s != nil {
			mine[level] = append(es, s.others...)
		}
	}
	return mine, nil
}

// exchange sends this replica's live entries on levels to the board and
// keeps what the others have there.
func (r *SharedRegistry) exchange(ctx context.Context, now time.Time, levels []string) error {
	got, err := r.board.Exchange(ctx, now, r.replica, r.shelves(levels, now))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, level := range levels {
		s := r.seen[level]
		if s == nil { // swept meanwhile
			s = &seenLevel{}
			r.seen[level] = s
		}
		s.busy = false
		if err == nil {
			s.others, s.at = got[level], now
		}
	}
	return err
}

// Withdraw implements Registry: the instance leaves this replica's
// entries, and the levels' records are exchanged at once, so the other
// replicas see it gone at their next exchange.
func (r *SharedRegistry) Withdraw(ctx context.Context, instance string, levels []string) error {
	if len(levels) == 0 {
		return nil
	}
	_ = r.local.Withdraw(ctx, instance, levels) // in process: no error
	r.mu.Lock()
	now := r.last
	r.mu.Unlock()
	_, err := r.board.Exchange(ctx, now, r.replica, r.shelves(levels, now))
	return err
}

// shelves is this replica's record of each level: its live entries there.
func (r *SharedRegistry) shelves(levels []string, now time.Time) []Shelf {
	out := make([]Shelf, len(levels))
	for i, level := range levels {
		es, until := r.local.live(level, now)
		out[i] = Shelf{Level: level, TTL: until.Sub(now), Entries: es}
	}
	return out
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
