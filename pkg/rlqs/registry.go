package rlqs

import (
	"context"
	"math"
	"sync"
	"time"
)

// Entry is one subscriber's demand on one level of a limit (a bucket of
// the config, by its key), as a replica publishes it.
type Entry struct {
	// Level is the level's bucket key.
	Level string
	// Instance names the subscriber, uniquely across replicas: an Envoy's
	// stream, or a replica's RLS calls on the level.
	Instance string
	// Demand is the requests per second it wants there; +Inf while not
	// known yet (an Envoy's first report).
	Demand float64
	// Active is when it last reported a request there, Unix microseconds;
	// 0 for never.
	Active int64
}

// Registry shares the subscribers of every level among the replicas that
// serve them: each replica publishes its own, and divides each level's
// limit among all of them. Entries not published again within their TTL
// are gone (a replica that died, an Envoy that left).
type Registry interface {
	// Publish records entries, valid for ttl from now, and returns every
	// live entry of each level of entries, from all replicas.
	Publish(ctx context.Context, now time.Time, ttl time.Duration, entries []Entry) (map[string][]Entry, error)
	// Withdraw removes an instance's entries on levels (a stream that
	// closed), so its share goes to the others at once.
	Withdraw(ctx context.Context, instance string, levels []string) error
}

// MemoryRegistry is a Registry in process, for one replica: the memory
// store's, and the one the failure mode local falls back to. It is safe
// for concurrent use.
type MemoryRegistry struct {
	mu     sync.Mutex
	levels map[string]map[string]held
	swept  time.Time
}

type held struct {
	Entry
	until time.Time
}

// NewMemoryRegistry returns an empty registry.
func NewMemoryRegistry() *MemoryRegistry {
	return &MemoryRegistry{levels: map[string]map[string]held{}}
}

// Publish implements Registry.
func (m *MemoryRegistry) Publish(_ context.Context, now time.Time, ttl time.Duration, entries []Entry) (map[string][]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	until := now.Add(ttl)
	for _, e := range entries {
		lv := m.levels[e.Level]
		if lv == nil {
			lv = map[string]held{}
			m.levels[e.Level] = lv
		}
		lv[e.Instance] = held{Entry: e, until: until}
	}
	out := make(map[string][]Entry, len(entries))
	for _, e := range entries {
		if _, done := out[e.Level]; done {
			continue
		}
		var live []Entry
		for id, h := range m.levels[e.Level] {
			if now.After(h.until) {
				delete(m.levels[e.Level], id)
				continue
			}
			live = append(live, h.Entry)
		}
		out[e.Level] = live
	}
	if now.Sub(m.swept) > ttl {
		m.sweep(now)
	}
	return out, nil
}

// sweep drops every entry past its TTL, so that levels no one publishes
// again cost nothing.
func (m *MemoryRegistry) sweep(now time.Time) {
	m.swept = now
	for level, lv := range m.levels {
		for id, h := range lv {
			if now.After(h.until) {
				delete(lv, id)
			}
		}
		if len(lv) == 0 {
			delete(m.levels, level)
		}
	}
}

// Withdraw implements Registry.
func (m *MemoryRegistry) Withdraw(_ context.Context, instance string, levels []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range levels {
		if lv := m.levels[l]; lv != nil {
			delete(lv, instance)
			if len(lv) == 0 {
				delete(m.levels, l)
			}
		}
	}
	return nil
}

// Len returns the entries held, expired or not.
func (m *MemoryRegistry) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, lv := range m.levels {
		n += len(lv)
	}
	return n
}

// unknown is the demand of a subscriber not measured yet.
var unknown = math.Inf(1)
