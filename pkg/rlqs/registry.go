package rlqs

import (
	"context"
	"math"
	"slices"
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
// for concurrent use. A level's entries are a short list, not a map: most
// levels have a few subscribers, and a map of one costs a kilobyte.
type MemoryRegistry struct {
	mu     sync.Mutex
	levels map[string][]held
	swept  time.Time
}

type held struct {
	instance string
	demand   float64
	active   int64
	until    int64 // Unix nanoseconds
}

// NewMemoryRegistry returns an empty registry.
func NewMemoryRegistry() *MemoryRegistry {
	return &MemoryRegistry{levels: map[string][]held{}}
}

// Publish implements Registry.
func (m *MemoryRegistry) Publish(_ context.Context, now time.Time, ttl time.Duration, entries []Entry) (map[string][]Entry, error) {
	view, _ := m.publish(now, ttl, entries)
	return view, nil
}

// publish is Publish, and names the levels that gained an instance.
func (m *MemoryRegistry) publish(now time.Time, ttl time.Duration, entries []Entry) (view map[string][]Entry, joined map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	until := now.Add(ttl).UnixNano()
	for _, e := range entries {
		lv := m.levels[e.Level]
		h := held{instance: e.Instance, demand: e.Demand, active: e.Active, until: until}
		i := slices.IndexFunc(lv, func(h held) bool { return h.instance == e.Instance })
		if i >= 0 {
			lv[i] = h
		} else {
			m.levels[e.Level] = append(lv, h)
			if joined == nil {
				joined = map[string]bool{}
			}
			joined[e.Level] = true
		}
	}
	at := now.UnixNano()
	out := make(map[string][]Entry, len(entries))
	for _, e := range entries {
		if _, done := out[e.Level]; done {
			continue
		}
		lv := slices.DeleteFunc(m.levels[e.Level], func(h held) bool { return at > h.until })
		m.levels[e.Level] = lv
		live := make([]Entry, len(lv))
		for i, h := range lv {
			live[i] = Entry{Level: e.Level, Instance: h.instance, Demand: h.demand, Active: h.active}
		}
		out[e.Level] = live
	}
	if now.Sub(m.swept) > ttl {
		m.sweep(at)
		m.swept = now
	}
	return out, joined
}

// sweep drops every entry past its TTL, so that levels no one publishes
// again cost nothing.
func (m *MemoryRegistry) sweep(at int64) {
	for level, lv := range m.levels {
		lv = slices.DeleteFunc(lv, func(h held) bool { return at > h.until })
		if len(lv) == 0 {
			delete(m.levels, level)
		} else {
			m.levels[level] = lv
		}
	}
}

// Withdraw implements Registry.
func (m *MemoryRegistry) Withdraw(_ context.Context, instance string, levels []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range levels {
		lv := slices.DeleteFunc(m.levels[l], func(h held) bool { return h.instance == instance })
		if len(lv) == 0 {
			delete(m.levels, l)
		} else {
			m.levels[l] = lv
		}
	}
	return nil
}

// unknown is the demand of a subscriber not measured yet.
var unknown = math.Inf(1)

// live returns level's entries not past their TTL at now, and when the
// last of them expires (now if none).
func (m *MemoryRegistry) live(level string, now time.Time) ([]Entry, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := now.UnixNano()
	var out []Entry
	until := at
	for _, h := range m.levels[level] {
		if at > h.until {
			continue
		}
		out = append(out, Entry{Level: level, Instance: h.instance, Demand: h.demand, Active: h.active})
		until = max(until, h.until)
	}
	return out, time.Unix(0, until)
}
