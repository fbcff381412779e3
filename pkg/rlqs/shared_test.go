package rlqs_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	records   map[string]map[string]held
	exchanges int
	levels    int
	failing   bool
}

type held struct {
	record rlqs.Record
	until  time.Time
}

func newMapBoard() *mapBoard { return &mapBoard{records: map[string]map[string]held{}} }

func (b *mapBoard) Exchange(_ context.Context, now time.Time, replica string, shelves []rlqs.Shelf) (map[string][]rlqs.Record, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing {
		return nil, errors.New("the board is down")
	}
	b.exchanges++
	b.levels += len(shelves)
	out := map[string][]rlqs.Record{}
	for _, sh := range shelves {
		recs := b.records[sh.Level]
		if recs == nil {
			recs = map[string]held{}
			b.records[sh.Level] = recs
		}
		if sh.Record == nil {
			delete(recs, replica)
		} else {
			recs[replica] = held{*sh.Record, now.Add(sh.TTL)}
		}
		out[sh.Level] = nil
		for name, r := range recs {
			if now.After(r.until) {
				delete(recs, name)
			} else if name != replica {
				rec := r.record
				rec.Replica = name
				out[sh.Level] = append(out[sh.Level], rec)
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
			rs[i] = rlqs.NewSharedRegistry(b, 0, 0)
		}
		return rs
	})
}

var inf = math.Inf(1)

func publishAt(t *testing.T, r rlqs.Registry, when time.Duration, es ...rlqs.Entry) rlqstest.Shares {
	t.Helper()
	return rlqstest.Publish(t, r, when, 10*time.Second, es...)
}

// TestSharedRegistryRefresh steps two replicas through fixed instants: a
// replica's own streams see each other at once; the other replica sees
// them as of this replica's last exchange, which happens when a level
// gains a subscriber here and otherwise at most once per refresh however
// many streams publish it; a withdrawal reaches the board at once.
func TestSharedRegistryRefresh(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	e := rlqstest.Entry
	steps := []struct {
		r         rlqs.Registry
		when      time.Duration
		entry     rlqs.Entry
		share     float64
		exchanges int // the board's count after the step
	}{
		{ra, 0, e(level, "a1", 10, 0), 10, 1},
		{ra, 200 * time.Millisecond, e(level, "a2", 20, 0), 20, 2},   // a new subscriber: exchanged at once
		{rb, 300 * time.Millisecond, e(level, "b1", inf, 0), 70, 3},  // rb's first: a1 and a2 leave 70
		{ra, 500 * time.Millisecond, e(level, "a1", 50, 0), 50, 3},   // a new demand waits; ra knows no b1 yet
		{rb, 900 * time.Millisecond, e(level, "b1", inf, 0), 70, 3},  // as of ra's last exchange
		{ra, 1200 * time.Millisecond, e(level, "a2", 20, 0), 20, 4},  // a refresh later: sees b1
		{rb, 1300 * time.Millisecond, e(level, "b1", inf, 0), 40, 5}, // sees a1's 50: the level is 40
	}
	for i, s := range steps {
		got := publishAt(t, s.r, s.when, s.entry)
		rlqstest.Check(t, fmt.Sprintf("step %d", i), got, rlqstest.Shares{level: {s.entry.Instance: s.share}})
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
	rlqstest.Check(t, "after the withdrawal", publishAt(t, rb, 2400*time.Millisecond, e(level, "b1", inf, 0)), rlqstest.Shares{level: {"b1": 80}})
	if err := ra.Withdraw(context.Background(), "a2", []string{level}); err != nil {
		t.Fatal(err)
	}
	rlqstest.Check(t, "all of a gone", publishAt(t, rb, 3500*time.Millisecond, e(level, "b1", inf, 0)), rlqstest.Shares{level: {"b1": 100}})
}

// TestSharedRegistryManyStreams: 50 streams of one replica publishing the
// same 400 levels once a second, at instants spread over the second, make
// one exchange of each level a second, not 50, once all have joined (each
// one's first publish goes at once).
func TestSharedRegistryManyStreams(t *testing.T) {
	b := newMapBoard()
	r := rlqs.NewSharedRegistry(b, time.Second, 0)
	const streams, levels, seconds = 50, 400, 5
	for sec := range seconds {
		for s := range streams {
			es := make([]rlqs.Entry, levels)
			for l := range es {
				es[l] = rlqstest.Entry(fmt.Sprintf("api|u=%d", l), fmt.Sprintf("s%d", s), 1, 0)
			}
			when := time.Duration(sec)*time.Second + time.Duration(s)*time.Second/streams
			// Each wants 1, at least its idle floor: a twentieth of an
			// equal part.
			n := min(s+1+sec*streams, streams)
			if got, want := publishAt(t, r, when, es...)["api|u=7"][fmt.Sprintf("s%d", s)], max(1, 100.0/20/float64(n)); got != want {
				t.Fatalf("second %d, stream %d: a share of %v, want %v", sec, s, got, want)
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
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	publishAt(t, rb, 0, rlqstest.Entry(level, "b", 30, 0))
	b.failing = true
	if err := ra.Publish(context.Background(), rlqstest.T0.Add(time.Second), 10*time.Second, []rlqs.Entry{rlqstest.Entry(level, "a", inf, 0)}); err == nil {
		t.Fatal("a publish with the board down succeeded")
	}
	b.failing = false
	rlqstest.Check(t, "back", publishAt(t, ra, 1100*time.Millisecond, rlqstest.Entry(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 70}})
}

// gatedBoard holds every exchange until open is closed, once hold is set.
type gatedBoard struct {
	*mapBoard
	hold    bool
	waiting chan struct{} // an exchange is held
	open    chan struct{}
}

func (g *gatedBoard) Exchange(ctx context.Context, now time.Time, replica string, shelves []rlqs.Shelf) (map[string][]rlqs.Record, error) {
	if g.hold {
		select {
		case g.waiting <- struct{}{}:
		default:
		}
		<-g.open
	}
	return g.mapBoard.Exchange(ctx, now, replica, shelves)
}

// TestSharedRegistryFleetLeaves: streams leaving together while their
// level is being exchanged cost one more exchange in all, not one each,
// and the board ends up without any of them.
func TestSharedRegistryFleetLeaves(t *testing.T) {
	const level, streams = "api|u=a", 100
	b := &gatedBoard{mapBoard: newMapBoard(), waiting: make(chan struct{}, 1), open: make(chan struct{})}
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	for s := range streams {
		publishAt(t, ra, 0, rlqstest.Entry(level, fmt.Sprintf("a%d", s), 1, 0))
	}
	publishAt(t, rb, 0, rlqstest.Entry(level, "b", inf, 0))
	before, _ := b.counts()
	b.hold = true
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Go(func() { errs <- ra.Withdraw(context.Background(), fmt.Sprintf("a%d", s), []string{level}) })
		if s == 0 {
			<-b.waiting // the first withdrawal's exchange is on its way
		}
	}
	// Every other withdrawal returns while the first exchange is held.
	for n := range streams - 1 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			close(b.open)
			t.Fatalf("after 10s, %d of %d withdrawals returned while an exchange was on its way: each waits for one of its own", n, streams-1)
		}
	}
	b.hold = false
	close(b.open)
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// The second exchange runs in the background: wait for it, then a
	// moment more for any beyond it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if after, _ := b.counts(); after-before >= 2 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	if after, _ := b.counts(); after-before != 2 {
		t.Errorf("%d streams left in %d exchanges, want 2", streams, after-before)
	}
	// b alone on the level: the whole limit.
	rlqstest.Check(t, "after the fleet left", publishAt(t, rb, 1100*time.Millisecond, rlqstest.Entry(level, "b", inf, 0)), rlqstest.Shares{level: {"b": 100}})
}

// staleAt publishes at T0+when with the board failing: the publish says
// so with a *StaleError of the level's last exchange, and still sets the
// shares, which it returns.
func staleAt(t *testing.T, r rlqs.Registry, when, lastExchange time.Duration, es ...rlqs.Entry) rlqstest.Shares {
	t.Helper()
	got, err := rlqstest.PublishErr(r, when, 10*time.Second, es...)
	var stale *rlqs.StaleError
	if !errors.As(err, &stale) || !stale.Since.Equal(rlqstest.T0.Add(lastExchange)) {
		t.Fatalf("publish at T0+%v with the board down: %v, want a StaleError of the exchange at T0+%v", when, err, lastExchange)
	}
	return got
}

// TestSharedRegistryRidesOutAFailedExchange: once a level was exchanged,
// a publish while the board fails says since when it is stale, and sets
// the shares from what the replica last read, however long ago: the
// service decides how long they stand.
func TestSharedRegistryRidesOutAFailedExchange(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	publishAt(t, rb, 0, rlqstest.Entry(level, "b", 30, 0))
	publishAt(t, ra, 0, rlqstest.Entry(level, "a", inf, 0))
	b.failing = true
	rlqstest.Check(t, "an exchange failed 2 s after the last", staleAt(t, ra, 2*time.Second, 0, rlqstest.Entry(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 70}})
	if b.exchanges != 2 {
		t.Fatalf("%d exchanges, want 2: the failed one is not counted", b.exchanges)
	}
	rlqstest.Check(t, "60 s after, past every record's TTL", staleAt(t, ra, 60*time.Second, 0, rlqstest.Entry(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 70}})
}

// TestSharedRegistryFrozenKeepsItsPart steps two replicas through a board
// fault: while their exchanges fail, each divides among its own
// subscribers what it held at the last division (its shares, and its part
// by count of what no one used), whatever their demands do meanwhile, so
// that together they never give out more than the limit; once the board
// answers, they divide afresh.
func TestSharedRegistryFrozenKeepsItsPart(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	e := rlqstest.Entry
	// 100/s: a1 wants 10, b1 80, b2 4: 6 unused, a third each by count.
	publishAt(t, ra, 0, e(level, "a1", 10, 0))
	publishAt(t, rb, 0, e(level, "b1", 80, 0), e(level, "b2", 4, 0))
	rlqstest.Check(t, "a before", publishAt(t, ra, 1100*time.Millisecond, e(level, "a1", 10, 0)), rlqstest.Shares{level: {"a1": 10}})
	rlqstest.Check(t, "b before", publishAt(t, rb, 1200*time.Millisecond, e(level, "b1", 80, 0), e(level, "b2", 4, 0)),
		rlqstest.Shares{level: {"b1": 80, "b2": 4}})
	b.failing = true
	// Every demand rises to all it can get: a holds 10 + 2, b 84 + 4.
	for _, step := range []time.Duration{2300 * time.Millisecond, 30 * time.Second} {
		rlqstest.Check(t, fmt.Sprintf("a, frozen, at %v", step), staleAt(t, ra, step, 1100*time.Millisecond, e(level, "a1", inf, 0), e(level, "a2", inf, 0)),
			rlqstest.Shares{level: {"a1": 6, "a2": 6}})
		rlqstest.Check(t, fmt.Sprintf("b, frozen, at %v", step), staleAt(t, rb, step, 1200*time.Millisecond, e(level, "b1", inf, 0), e(level, "b2", inf, 0)),
			rlqstest.Shares{level: {"b1": 44, "b2": 44}})
	}
	if sum, _ := ra.Summary(level, 0); !sum.FailStatic || sum.OthersHeld == nil || math.Abs(*sum.OthersHeld-88) > 1e-9 {
		t.Fatalf("a's summary while frozen: %+v, want fail-static with 88/s held by the others", sum)
	}
	b.failing = false
	publishAt(t, ra, 31*time.Second, e(level, "a1", inf, 0), e(level, "a2", inf, 0))
	rlqstest.Check(t, "b after", publishAt(t, rb, 31100*time.Millisecond, e(level, "b1", inf, 0), e(level, "b2", inf, 0)),
		rlqstest.Shares{level: {"b1": 25, "b2": 25}})
	rlqstest.Check(t, "a after", publishAt(t, ra, 32200*time.Millisecond, e(level, "a1", inf, 0), e(level, "a2", inf, 0)),
		rlqstest.Shares{level: {"a1": 25, "a2": 25}})
	if sum, _ := ra.Summary(level, 0); sum.FailStatic || sum.OthersHeld != nil {
		t.Fatalf("a's summary once the board is back: %+v, want it fresh", sum)
	}
}

// TestSharedRegistryHoldsPeersAfterAFault: a board fault longer than the
// records' TTL. The replica that exchanges first after it finds its peer's
// record gone from the board (it ran out while no one could write) and
// holds the record it last read for an entries' TTL, rather than handing
// its own subscribers the peer's part; a peer that writes again within it
// is read as ever, and one that does not (it died meanwhile) stops
// counting at its end.
func TestSharedRegistryHoldsPeersAfterAFault(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb, rc := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	e := rlqstest.Entry
	publishAt(t, rb, 0, e(level, "b", inf, 0))
	publishAt(t, rc, 0, e(level, "c", inf, 0))
	rlqstest.Check(t, "a before", publishAt(t, ra, 0, e(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 100.0 / 3}})
	b.failing = true
	staleAt(t, ra, 5*time.Second, 0, e(level, "a", inf, 0))
	b.failing = false
	// 30 s later b's and c's records are gone from the board: a holds them.
	rlqstest.Check(t, "a first after the fault", publishAt(t, ra, 30*time.Second, e(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 100.0 / 3}})
	// b writes again; c, dead, never does.
	publishAt(t, rb, 32*time.Second, e(level, "b", inf, 0))
	rlqstest.Check(t, "a with b back, c held", publishAt(t, ra, 35*time.Second, e(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 100.0 / 3}})
	publishAt(t, rb, 38*time.Second, e(level, "b", inf, 0))
	rlqstest.Check(t, "a past the hold", publishAt(t, ra, 40100*time.Millisecond, e(level, "a", inf, 0)), rlqstest.Shares{level: {"a": 50}})
}

// TestSharedRegistryFrozenWithoutADivision: a level that leaves this
// replica and comes back while the board fails has no division of its
// own to hold: its publish says it was never exchanged (the failure mode
// answers), and it gives out nothing, never the whole rate.
func TestSharedRegistryFrozenWithoutADivision(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	e := rlqstest.Entry
	publishAt(t, rb, 0, e(level, "b1", inf, 0))
	publishAt(t, ra, 100*time.Millisecond, e(level, "a1", inf, 0))
	publishAt(t, rb, 1200*time.Millisecond, e(level, "b1", inf, 0))
	if err := ra.Withdraw(context.Background(), "a1", []string{level}); err != nil {
		t.Fatal(err)
	}
	b.failing = true
	got, err := rlqstest.PublishErr(ra, 30*time.Second, 10*time.Second, e(level, "a2", inf, 0))
	var stale *rlqs.StaleError
	if !errors.As(err, &stale) || !stale.Since.IsZero() {
		t.Fatalf("a level back here while the board fails: %v, want a StaleError of no exchange", err)
	}
	if s := got[level]["a2"]; s != 0 {
		t.Fatalf("a level back here while the board fails gave %v, want nothing", s)
	}
}

// TestSharedRegistryFrozenRateChanges: a limit's rate that changes while
// its level is frozen is held in the same parts: a replica keeps its part
// of the new rate, so the parts still add up to it.
func TestSharedRegistryFrozenRateChanges(t *testing.T) {
	const level = "api|u=a"
	b := newMapBoard()
	ra, rb := rlqs.NewSharedRegistry(b, time.Second, 0), rlqs.NewSharedRegistry(b, time.Second, 0)
	entry := func(inst string, rate float64) rlqs.Entry {
		return rlqs.Entry{Level: level, Instance: inst, Rate: rate, Demand: inf}
	}
	publishAt(t, ra, 0, entry("a1", 100))
	publishAt(t, rb, 0, entry("b1", 100))
	rlqstest.Check(t, "a before", publishAt(t, ra, 1100*time.Millisecond, entry("a1", 100)), rlqstest.Shares{level: {"a1": 50}})
	rlqstest.Check(t, "b before", publishAt(t, rb, 1200*time.Millisecond, entry("b1", 100)), rlqstest.Shares{level: {"b1": 50}})
	b.failing = true
	rlqstest.Check(t, "a at 200/s, frozen", staleAt(t, ra, 5*time.Second, 1100*time.Millisecond, entry("a1", 200)), rlqstest.Shares{level: {"a1": 100}})
	rlqstest.Check(t, "b at 200/s, frozen", staleAt(t, rb, 5*time.Second, 1200*time.Millisecond, entry("b1", 200)), rlqstest.Shares{level: {"b1": 100}})
}

// TestSharedRegistryStaleWhileExchanging: once a level's exchange failed,
// a publish while the next exchange is on its way (another stream's) is
// stale too, not fresh: the failure goes on counting.
func TestSharedRegistryStaleWhileExchanging(t *testing.T) {
	const level = "api|u=a"
	b := &gatedBoard{mapBoard: newMapBoard(), waiting: make(chan struct{}, 1), open: make(chan struct{})}
	ra := rlqs.NewSharedRegistry(b, time.Second, 0)
	e := rlqstest.Entry
	publishAt(t, ra, 0, e(level, "a1", inf, 0))
	b.failing = true
	staleAt(t, ra, 2*time.Second, 0, e(level, "a1", inf, 0))
	b.failing, b.hold = false, true
	done := make(chan error, 1)
	go func() {
		_, err := rlqstest.PublishErr(ra, 3100*time.Millisecond, 10*time.Second, e(level, "a1", inf, 0))
		done <- err
	}()
	<-b.waiting // that exchange is on its way
	staleAt(t, ra, 3200*time.Millisecond, 0, e(level, "a2", inf, 0))
	close(b.open)
	if err := <-done; err != nil {
		t.Fatalf("the exchange that answered: %v", err)
	}
	publishAt(t, ra, 3300*time.Millisecond, e(level, "a2", inf, 0)) // fresh again
}
