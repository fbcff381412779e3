package rlqs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs/rlqstest"
)

// mapBoard is a Board in process, with the Redis board's rules: a record
// per replica and level, gone past its TTL. It counts the exchanges and
// the levels they carry, and fails while failing is set.
type mapBoard struct {
	mu        sync.Mutex
	records   map[string]map[string]record
	exchanges int
	levels    int
	failing   bool
}

type record struct {
	entries []rlqs.Entry
	until   time.Time
}

func newMapBoard() *mapBoard { return &mapBoard{records: map[string]map[string]record{}} }

func (b *mapBoard) Exchange(_ context.Context, now time.Time, replica string, shelves []rlqs.Shelf) (map[string][]rlqs.Entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing {
		return nil, errors.New("the board is down")
	}
	b.exchanges++
	b.levels += len(shelves)
	out := map[string][]rlqs.Entry{}
	for _, sh := range shelves {
		recs := b.records[sh.Level]
		if recs == nil {
			recs = map[string]record{}
			b.records[sh.Level] = recs
		}
		if len(sh.Entries) == 0 {
			delete(recs, replica)
		} else {
			recs[replica] = record{sh.Entries, now.Add(sh.TTL)}
		}
		out[sh.Level] = nil
		for name, r := range recs {
			if now.After(r.until) {
				delete(recs, name)
			} else if name != replica {
				out[sh.Level] = append(out[sh.Level], r.entries...)
			}
		}
	}
	return out, nil
}

func (b *mapBoard) counts() (exchanges, levels int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exchanges, b.levels
}

// TestSharedRegistryConformance runs the registry suite on replicas that
// share a board in process and exchange at every publish.
func TestSharedRegistryConformance(t *testing.T) {
	rlqstest.Run(t, func(t *testing.T, n int) []rlqs.Registry {
		b := newMapBoard()
		rs := make([]rlqs.Registry, n)
		for i := range rs {
			rs[i] = rlqs.NewSharedRegistry(b, 0)
		}
		return rs
	}, rlqstest.Options{})
}

var t0 = rlqstest.T0

func at(d time.Duration) time.Time { return t0.Add(d) }

func publishAt(t *testing.T, r rlqs.Registry, when time.Duration, es ...rlqs.Entry) rlqstest.View {
	t.Helper()
	v, err := r.Publish(context.Background(), at(when), 10*time.Second, es)
	if err != nil {
		t.Fatalf("publish at T0+%v: %v", when, err)
	}
	return v
}

func e(level, instance string, demand float64) rlqs.Entry {
	return rlqs.Entry{Level: level, Instance: instance, Demand: demand}
}

// TestSharedRegistryRefresh steps two replicas through fixed instants: a
// replica's own streams see each other at once; the other replica sees
// them as of this replica's last exchange, which happens when a level
// gains a subscriber here and otherwise at most once per refresh however
// many streams publish it; a withdrawal reaches the board at once.
func TestSharedRegistryRefresh(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second), rlqs.NewSharedRegistry(b, time.Second)
	a1, a2, b1 := e(level, "a1", 1), e(level, "a2", 2), e(level, "b1", 3)
	a1b := e(level, "a1", 5)
	steps := []struct {
		r         rlqs.Registry
		when      time.Duration
		entry     rlqs.Entry
		want      []rlqs.Entry
		exchanges int // the board's count after the step
	}{
		{ra, 0, a1, []rlqs.Entry{a1}, 1},
		{ra, 200 * time.Millisecond, a2, []rlqs.Entry{a1, a2}, 2},       // a new subscriber: exchanged at once
		{rb, 300 * time.Millisecond, b1, []rlqs.Entry{a1, a2, b1}, 3},   // rb's first
		{ra, 500 * time.Millisecond, a1b, []rlqs.Entry{a1b, a2}, 3},     // a new demand waits; b1 not seen yet
		{rb, 900 * time.Millisecond, b1, []rlqs.Entry{a1, a2, b1}, 3},   // as of ra's last exchange
		{ra, 1200 * time.Millisecond, a2, []rlqs.Entry{a1b, a2, b1}, 4}, // a refresh later
		{rb, 1300 * time.Millisecond, b1, []rlqs.Entry{a1b, a2, b1}, 5},
	}
	for i, s := range steps {
		rlqstest.Check(t, fmt.Sprintf("step %d", i), publishAt(t, s.r, s.when, s.entry), rlqstest.View{level: s.want})
		if n, _ := b.counts(); n != s.exchanges {
			t.Fatalf("step %d: %d exchanges, want %d", i, n, s.exchanges)
		}
	}
	if err := ra.Withdraw(context.Background(), "a1", []string{level}); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.counts(); n != 6 {
		t.Fatalf("a withdrawal: %d exchanges, want 6", n)
	}
	rlqstest.Check(t, "after the withdrawal", publishAt(t, rb, 2400*time.Millisecond, b1), rlqstest.View{level: {a2, b1}})
	if err := ra.Withdraw(context.Background(), "a2", []string{level}); err != nil {
		t.Fatal(err)
	}
	rlqstest.Check(t, "all of a gone", publishAt(t, rb, 3500*time.Millisecond, b1), rlqstest.View{level: {b1}})
}

// TestSharedRegistryManyStreams: 50 streams of one replica publishing the
// same 400 levels once a second, at instants spread over the second, make
// one exchange of each level a second, not 50, once all have joined (each
// one's first publish goes at once).
func TestSharedRegistryManyStreams(t *testing.T) {
	b := newMapBoard()
	r := rlqs.NewSharedRegistry(b, time.Second)
	const streams, levels, seconds = 50, 400, 5
	for sec := range seconds {
		for s := range streams {
			es := make([]rlqs.Entry, levels)
			for l := range es {
				es[l] = e(fmt.Sprintf("api|u=%d", l), fmt.Sprintf("s%d", s), 1)
			}
			when := time.Duration(sec)*time.Second + time.Duration(s)*time.Second/streams
			v := publishAt(t, r, when, es...)
			if got := len(v["api|u=7"]); got != min(s+1+sec*streams, streams) {
				t.Fatalf("second %d, stream %d: %d entries on a level, want %d", sec, s, got, min(s+1+sec*streams, streams))
			}
		}
	}
	_, exchanged := b.counts()
	if want := (streams + seconds - 1) * levels; exchanged != want {
		t.Fatalf("%d levels exchanged in %d s, want %d (one a stream joining, then one a level a second)", exchanged, seconds, want)
	}
}

// TestSharedRegistryBoardDown: a publish fails while the board does (the
// failure mode answers), and the next one after it is back exchanges
// again at once.
func TestSharedRegistryBoardDown(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second), rlqs.NewSharedRegistry(b, time.Second)
	publishAt(t, rb, 0, e(level, "b", 1))
	b.failing = true
	if _, err := ra.Publish(context.Background(), at(time.Second), 10*time.Second, []rlqs.Entry{e(level, "a", 1)}); err == nil {
		t.Fatal("a publish with the board down succeeded")
	}
	b.failing = false
	rlqstest.Check(t, "back", publishAt(t, ra, 1100*time.Millisecond, e(level, "a", 1)), rlqstest.View{level: {e(level, "a", 1), e(level, "b", 1)}})
}
