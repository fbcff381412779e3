package rlqs

import (
	"context"
	"math"
	"sync"
	"time"
)

// Entry is one subscriber's demand on one level of a limit (a bucket of
// the config, by its key), as a replica publishes it, and what the
// publish answers.
type Entry struct {
	// Level is the level's bucket key.
	Level string
	// Instance names the subscriber, uniquely across replicas: an Envoy's
	// stream, or a replica's RLS calls on the level.
	Instance string
	// Rate is the level's limit, requests per second: what is divided.
	Rate float64
	// Demand is the requests per second it wants there; +Inf while not
	// known yet (an Envoy's first report).
	Demand float64
	// Active is when it last reported a request there, Unix microseconds;
	// 0 for never.
	Active int64

	// Share is set by Publish: the subscriber's part of Rate, requests
	// per second.
	Share float64
	// Latest is set by Publish: the latest Active of any subscriber of
	// the level, on any replica, as far as this one knows.
	Latest int64

	// lv and h are where a MemoryRegistry's publish recorded it, for the
	// shares it reads back in the same publish; given again with the next
	// publish of the same instance and level, they spare it two lookups.
	lv *levelState
	h  *held
}

// Registry divides each level's limit among the subscribers of every
// replica that serves them: each replica publishes its own, and reads
// their shares. Entries not published again within their TTL are gone (a
// replica that died, an Envoy that left).
type Registry interface {
	// Publish records entries, valid for ttl from now, and sets each
	// one's Share and Latest. A *StaleError says the other replicas could
	// not be reached: the shares are set all the same, from what this
	// replica last knew of them; any other error, that they are not set.
	Publish(ctx context.Context, now time.Time, ttl time.Duration, entries []Entry) error
	// Withdraw removes an instance's entries on levels (a stream that
	// closed), so that its share goes to the others at the level's next
	// division.
	Withdraw(ctx context.Context, instance string, levels []string) error
	// Summary describes a level as this replica divides it, with its top
	// largest shares here; false if no one here subscribes to it.
	Summary(level string, top int) (LevelSummary, bool)
}

// StaleError is a Publish whose exchange with the other replicas failed.
// The entries' shares are set all the same, from the other replicas'
// records as last read, each level here dividing what it held then
// (Division.Frozen): the caller chooses whether to answer with them.
type StaleError struct {
	// Since is when the levels were all last exchanged (the oldest of
	// their last exchanges); zero if one of them never was.
	Since time.Time
	Err   error
}

func (e *StaleError) Error() string {
	return "the other replicas' demands could not be exchanged: " + e.Err.Error()
}

func (e *StaleError) Unwrap() error { return e.Err }

// DefaultDivideEvery is how often a MemoryRegistry works a level's
// division out anew at most: what makes a report's cost independent of
// the number of subscribers (a division sorts them all; a report between
// two reads the last). A changed demand moves the shares within it, and
// reaches each Envoy at its next report after: within two report
// intervals, the shortest being a second. A subscriber new since counts
// at once, as wanting all it can get.
const DefaultDivideEvery = time.Second

// MemoryRegistry is a Registry in process, for one replica: the memory
// store's, the one the failure mode local falls back to, and the one a
// SharedRegistry keeps this replica's own subscribers in, beside the
// others' records. It is safe for concurrent use.
type MemoryRegistry struct {
	every time.Duration

	mu     sync.Mutex
	levels map[string]*levelState
	swept  time.Time
}

// NewMemoryRegistry returns an empty registry that divides a level anew
// at most once every every (0: at every publish that changed it).
func NewMemoryRegistry(every time.Duration) *MemoryRegistry {
	return &MemoryRegistry{every: max(every, 0), levels: map[string]*levelState{}}
}

// Publish implements Registry.
func (m *MemoryRegistry) Publish(_ context.Context, now time.Time, ttl time.Duration, entries []Entry) error {
	m.record(now, ttl, entries)
	m.shares(now, entries)
	return nil
}

// record keeps entries, valid for ttl from now, and returns the levels
// that gained a subscriber.
func (m *MemoryRegistry) record(now time.Time, ttl time.Duration, entries []Entry) (joined map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	until := now.Add(ttl).UnixNano()
	var last *levelState
	for i := range entries {
		e := &entries[i]
		lv := last
		switch {
		case e.lv != nil && e.lv.owner == m && e.h != nil && !e.h.gone && e.h.instance == e.Instance && e.lv.level == e.Level:
			// Where this registry put it last time, still there: no lookup.
			lv = e.lv
		case lv == nil || (i > 0 && entries[i-1].Level != e.Level):
			e.h = nil
			if lv = m.levels[e.Level]; lv == nil {
				lv = newLevelState(m, e.Level)
				m.levels[e.Level] = lv
			}
		default:
			e.h = nil
		}
		last = lv
		e.lv = lv
		if lv.put(e, until) {
			if joined == nil {
				joined = map[string]bool{}
			}
			joined[e.Level] = true
		}
	}
	if now.Sub(m.swept) > max(ttl, time.Second) {
		m.sweep(now)
		m.swept = now
	}
	return joined
}

// shares divides anew each level of entries that changed, if its last
// division is every old, and sets each entry's Share and Latest.
func (m *MemoryRegistry) shares(now time.Time, entries []Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range entries {
		e := &entries[i]
		lv := e.lv
		if lv.stale(now) && (lv.div.At.IsZero() || now.Sub(lv.div.At) >= m.every) {
			lv.divide(now)
		}
		e.Share, e.Latest = lv.shareOf(e.h), lv.latest
	}
}

// sweep drops every entry past its TTL, and the levels left empty, so
// that levels no one publishes again cost nothing. Called with m.mu held.
func (m *MemoryRegistry) sweep(now time.Time) {
	at := now.UnixNano()
	for level, lv := range m.levels {
		lv.subs.keep(func(h *held) bool {
			if at > h.until {
				lv.dirty = true
				return false
			}
			return true
		})
		if lv.subs.len() == 0 {
			delete(m.levels, level)
		}
	}
}

// Withdraw implements Registry.
func (m *MemoryRegistry) Withdraw(_ context.Context, instance string, levels []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range levels {
		lv := m.levels[l]
		if lv == nil {
			continue
		}
		if lv.subs.remove(instance) {
			lv.dirty = true
		}
		if lv.subs.len() == 0 {
			delete(m.levels, l)
		}
	}
	return nil
}

// Summary implements Registry.
func (m *MemoryRegistry) Summary(level string, top int) (LevelSummary, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lv := m.levels[level]
	if lv == nil {
		return LevelSummary{}, false
	}
	return lv.summary(level, top), true
}

// record returns this replica's record of each level: its live
// subscribers, as a few groups (the other replicas' view of them), with
// how long the record holds.
func (m *MemoryRegistry) records(levels []string, now time.Time) []Shelf {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Shelf, len(levels))
	for i, level := range levels {
		out[i].Level = level
		if lv := m.levels[level]; lv != nil {
			out[i].Record, out[i].TTL = lv.record(now)
		}
	}
	return out
}

// setOthers keeps what the other replicas publish on each level: their
// records, as an exchange at now read them (those of a level whose
// exchanges failed before held for hold, levelState.setOthers).
func (m *MemoryRegistry) setOthers(got map[string][]Record, now time.Time, hold time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for level, recs := range got {
		if lv := m.levels[level]; lv != nil {
			lv.setOthers(recs, now, hold)
		}
	}
}

// divided reports whether each of levels was divided here with the
// other replicas' records fresh at least once: what a frozen level holds.
func (m *MemoryRegistry) divided(levels []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, level := range levels {
		if lv := m.levels[level]; lv == nil || !lv.claimed {
			return false
		}
	}
	return true
}

// freeze marks levels whose exchange failed: their subscribers here
// divide what they held until one answers (levelState.freeze).
func (m *MemoryRegistry) freeze(levels []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, level := range levels {
		if lv := m.levels[level]; lv != nil {
			lv.freeze()
		}
	}
}

// unknown is the demand of a subscriber not measured yet.
var unknown = math.Inf(1)
