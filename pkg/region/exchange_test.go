package region

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// memBoard is a Board in process, with the Redis board's rules: a report
// per field, gone past its TTL. It fails while down is set.
type memBoard struct {
	mu      sync.Mutex
	reports map[string]posted
	down    bool
}

type posted struct {
	report string
	until  time.Time
}

func newMemBoard() *memBoard { return &memBoard{reports: map[string]posted{}} }

func (b *memBoard) ExchangeReport(_ context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return nil, errors.New("the board is down")
	}
	b.reports[field] = posted{string(report), now.Add(ttl)}
	var out []Posted
	for f, p := range b.reports {
		if now.After(p.until) {
			delete(b.reports, f)
		} else if f != field {
			out = append(out, Posted{Field: f, Report: p.report})
		}
	}
	return out, nil
}

// regionUnderTest is one region's replica: its exchange, its store under
// its claims, and what it was asked of one bucket a second.
type regionUnderTest struct {
	x        *Exchange
	st       *Store
	rate     float64
	owed     float64
	admitted int
}

// TestExchangeDividesALimit: two regions, each a replica on a memory
// store of its own and a board of its own, each writing its reports to
// the other's board too, on one limit of 60 a second, asked 60 and 20 a
// second: within a few exchanges they admit 40 and 20, 60 together, as a
// max-min fair division has it. Then the first region's board fails:
// the second goes on with the claims in force, the first keeps its own.
func TestExchangeDividesALimit(t *testing.T) {
	boards := map[string]*memBoard{"eu": newMemBoard(), "us": newMemBoard()}
	var clock time.Time = time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	var rs []*regionUnderTest
	for _, name := range []string{"eu", "us"} {
		peers := map[string]Board{}
		for other, b := range boards {
			if other != name {
				peers[other] = b
			}
		}
		x, err := New(Options{Region: name, Regions: []string{"eu", "us"}, Own: boards[name], Peers: peers,
			Interval: time.Second, Silence: 30 * time.Second, Clock: now})
		if err != nil {
			t.Fatal(err)
		}
		st, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rs = append(rs, &regionUnderTest{x: x, st: x.Wrap(st)})
	}
	rs[0].rate, rs[1].rate = 60, 20
	ctx := context.Background()
	res := make([]limit.Result, 1)
	run := func(d time.Duration) {
		for end := clock.Add(d); clock.Before(end); clock = clock.Add(10 * time.Millisecond) {
			iv := time.Second
			if clock.Truncate(iv).Equal(clock) {
				epoch := clock.UnixNano() / int64(iv)
				for _, r := range rs {
					r.x.Publish(ctx, epoch-1, clock)
				}
			}
			if clock.Add(-iv / 2).Truncate(iv).Equal(clock.Add(-iv / 2)) {
				for _, r := range rs {
					r.x.Divide(ctx, clock.UnixNano()/int64(iv), clock)
				}
			}
			for _, r := range rs {
				for r.owed += r.rate * 0.01; r.owed >= 1; r.owed-- {
					req := []limit.Bucket{{Key: "api|user=u", Limit: l, Hits: 1}}
					r.x.Asked(req)
					if err := r.st.Apply(ctx, clock, req, res); err != nil {
						t.Fatal(err)
					}
					if res[0].Admitted {
						r.admitted++
					}
				}
			}
		}
	}
	measure := func(d time.Duration) []float64 {
		before := []int{rs[0].admitted, rs[1].admitted}
		run(d)
		return []float64{float64(rs[0].admitted-before[0]) / d.Seconds(), float64(rs[1].admitted-before[1]) / d.Seconds()}
	}
	run(5 * time.Second)
	got := measure(10 * time.Second)
	t.Logf("eu %.1f/s, us %.1f/s", got[0], got[1])
	if math.Abs(got[0]-40) > 2 || math.Abs(got[1]-20) > 2 {
		t.Fatalf("eu %.1f/s and us %.1f/s, want 40 and 20", got[0], got[1])
	}
	if last := rs[1].x.LastExchange("eu"); clock.Sub(last) > time.Second {
		t.Fatalf("us last exchanged with eu's store at %v, more than an interval before %v", last, clock)
	}

	// eu's store down: us cannot write there, eu cannot read or write its
	// own; each keeps deciding under what it holds.
	boards["eu"].down = true
	got = measure(10 * time.Second)
	t.Logf("eu's store down: eu %.1f/s, us %.1f/s", got[0], got[1])
	if got[0]+got[1] > 60*1.02 || got[0] < 36 || got[1] < 18 {
		t.Fatalf("eu's store down: eu %.1f/s and us %.1f/s, want about 40 and 20 as before", got[0], got[1])
	}
}

// TestRegionalBucketsAreNotDivided: a bucket kept to its region (scope:
// region) is decided under its whole limit and not counted for the
// exchange; another, before any report, under an equal part.
func TestRegionalBucketsAreNotDivided(t *testing.T) {
	x, err := New(Options{Region: "eu", Regions: []string{"eu", "us", "ap"}, Own: newMemBoard(), Interval: time.Second, Silence: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	st := x.Wrap(inner)
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	now := time.Unix(1_800_000_000, 0)
	admitted := func(b limit.Bucket) int {
		n := 0
		res := make([]limit.Result, 1)
		for range 100 {
			x.Asked([]limit.Bucket{b})
			if err := st.Apply(context.Background(), now, []limit.Bucket{b}, res); err != nil {
				t.Fatal(err)
			}
			if res[0].Admitted {
				n++
			}
		}
		return n
	}
	if n := admitted(limit.Bucket{Key: "api|mine=x", Limit: l, Hits: 1, Regional: true}); n != 60 {
		t.Errorf("a regional bucket admitted %d at once, want its whole 60", n)
	}
	if n := admitted(limit.Bucket{Key: "api|shared=x", Limit: l, Hits: 1}); n != 20 {
		t.Errorf("a divided bucket admitted %d at once before any report, want an equal part, 20", n)
	}
	rep := x.report(1, now)
	if _, ok := rep.lookup(KeyHash("api|mine=x")); ok || rep.len() != 1 {
		t.Errorf("the report names %d buckets, the regional one among them: %v", rep.len(), rep.list)
	}
}

// TestReplicasCountTheirPart: two replicas of one region on one store,
// each admitting 10 at once: each drains its count by its part of the
// region's drain, so what they report together 200 ms on is no less than
// what the region's bucket holds. (Each draining the region's whole
// share, they reported nothing while the bucket held 8.)
func TestReplicasCountTheirPart(t *testing.T) {
	board := newMemBoard()
	clock := time.Unix(1_800_000_000, 0)
	var xs []*Exchange
	for range 2 {
		x, err := New(Options{Region: "eu", Regions: []string{"eu", "us"}, Own: board, Interval: time.Second, Silence: time.Minute,
			Clock: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	inner, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	ctx := context.Background()
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	b := limit.Bucket{Key: "api|user=u", Limit: l, Hits: 1}
	// Two epochs: both replicas report, and learn there are two of them.
	for epoch := int64(1); epoch <= 2; epoch++ {
		for _, x := range xs {
			x.Asked([]limit.Bucket{b})
			if err := x.Publish(ctx, epoch-1, clock); err != nil {
				t.Fatal(err)
			}
		}
		for _, x := range xs {
			if err := x.Divide(ctx, epoch, clock); err != nil {
				t.Fatal(err)
			}
		}
		clock = clock.Add(time.Second)
	}
	res := make([]limit.Result, 1)
	for _, x := range xs {
		st := x.Wrap(inner)
		for range 10 {
			x.Asked([]limit.Bucket{b})
			if err := st.Apply(ctx, clock, []limit.Bucket{b}, res); err != nil || !res[0].Admitted {
				t.Fatalf("%v, %+v", err, res[0])
			}
		}
	}
	clock = clock.Add(200 * time.Millisecond)
	reported := 0.0
	for _, x := range xs {
		rep := x.report(3, clock)
		rec, _ := rep.lookup(KeyHash(b.Key))
		reported += rec.Usage
	}
	states := make([]limit.State, 1)
	at, err := inner.State(ctx, clock, []limit.Bucket{{Key: b.Key, Limit: xs[0].Scaled(KeyHash(b.Key), l)}}, states)
	if err != nil {
		t.Fatal(err)
	}
	level := float64(limit.Count(states[0], xs[0].Scaled(KeyHash(b.Key), l), at))
	t.Logf("the replicas report %.1f, the bucket holds %.0f", reported, level)
	if reported < level-1 { // the bucket drips whole requests: a drip's difference
		t.Fatalf("the replicas report %.1f in all, less than the %.0f the region's bucket holds", reported, level)
	}
}

// TestRefusedRequestsCountNothing: a request refused by one of its
// buckets charges none, and the wrapper counts none of its hits as
// admitted, the bucket with room included.
func TestRefusedRequestsCountNothing(t *testing.T) {
	x, err := New(Options{Region: "eu", Regions: []string{"eu"}, Own: newMemBoard(), Interval: time.Second, Silence: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	now := time.Unix(1_800_000_000, 0)
	roomy := limit.Bucket{Key: "api|user=u", Limit: limit.Rate{RequestsPerUnit: 100, Unit: limit.Second}.Limit(), Hits: 1}
	full := limit.Bucket{Key: "api|user=u|action=a", Limit: limit.Limit{Size: 0, DripRate: time.Second, DripSize: 1}, Hits: 1}
	res := make([]limit.Result, 2)
	if err := x.Wrap(inner).Apply(context.Background(), now, []limit.Bucket{roomy, full}, res); err != nil {
		t.Fatal(err)
	}
	rep := x.report(1, now)
	if got, _ := rep.lookup(KeyHash(roomy.Key)); got.Usage != 0 {
		t.Fatalf("a refused request counted %v in the bucket that had room", got.Usage)
	}
}

// postBoard is a memBoard that takes posts too, and counts both kinds.
type postBoard struct {
	*memBoard
	posts, exchanges int
}

func (b *postBoard) ExchangeReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	b.exchanges++
	return b.memBoard.ExchangeReport(ctx, now, field, report, ttl)
}

func (b *postBoard) PostReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) error {
	b.posts++
	_, err := b.memBoard.ExchangeReport(ctx, now, field, report, ttl)
	return err
}

// TestPeersArePosted: a replica posts its report to the other regions'
// stores that take posts, and exchanges with its own (reading the
// others' there).
func TestPeersArePosted(t *testing.T) {
	own, peer := &postBoard{memBoard: newMemBoard()}, &postBoard{memBoard: newMemBoard()}
	clock := time.Unix(1_800_000_000, 0)
	x, err := New(Options{Region: "eu", Regions: []string{"eu", "us"}, Own: own, Peers: map[string]Board{"us": peer},
		Interval: time.Second, Silence: time.Minute, Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	x.Asked([]limit.Bucket{{Key: "api|user=u", Limit: limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit(), Hits: 1}})
	if err := x.Publish(context.Background(), 0, clock); err != nil {
		t.Fatal(err)
	}
	if own.exchanges != 1 || own.posts != 0 || peer.exchanges != 0 || peer.posts != 1 {
		t.Fatalf("own store: %d exchanges, %d posts; the peer's: %d, %d; want 1, 0 and 0, 1", own.exchanges, own.posts, peer.exchanges, peer.posts)
	}
	if len(peer.reports) != 1 {
		t.Fatalf("the peer's store holds %d reports, want eu's", len(peer.reports))
	}
}

// TestIdleBucketsAreForgotten: a bucket not used for longer than a region
// may be silent, and counting nothing, is forgotten; used again, it is
// reported again.
func TestIdleBucketsAreForgotten(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	x, err := New(Options{Region: "eu", Regions: []string{"eu"}, Own: newMemBoard(), Interval: time.Second, Silence: 2 * time.Second,
		Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	idle, busy := limit.Bucket{Key: "api|user=idle", Limit: l, Hits: 1}, limit.Bucket{Key: "api|user=busy", Limit: l, Hits: 1}
	x.Asked([]limit.Bucket{idle, busy})
	for epoch := int64(1); epoch <= 5; epoch++ {
		x.Asked([]limit.Bucket{busy})
		x.report(epoch, clock)
		clock = clock.Add(time.Second)
	}
	if _, ok := x.uses.Load(KeyHash(idle.Key)); ok || len(x.inOrder()) != 1 {
		t.Fatalf("the idle bucket is still used (%d buckets in order), want it forgotten", len(x.inOrder()))
	}
	x.Asked([]limit.Bucket{idle, busy})
	rep := x.report(6, clock)
	if rec, _ := rep.lookup(KeyHash(idle.Key)); rep.len() != 2 || rec.Demand != 1 {
		t.Fatalf("used again, the bucket reports %+v; want it with the busy one", rep.list)
	}
}

// TestStandingDemand: a source's standing demand (an RLQS stream's)
// counts in every report until it lapses or is withdrawn, summed with
// the other sources' and the hits asked per request; a lapsed one is
// dropped.
func TestStandingDemand(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	x, err := New(Options{Region: "eu", Regions: []string{"eu", "us"}, Own: newMemBoard(), Peers: map[string]Board{"us": newMemBoard()},
		Interval: time.Second, Silence: 30 * time.Second, Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	const key = "api|tenant=acme"
	h := KeyHash(key)
	demand := func() float64 {
		rep := x.report(0, clock)
		rec, ok := rep.lookup(h)
		if !ok {
			return -1 // not reported
		}
		return rec.Demand
	}
	a, b := new(int), new(int)
	x.Wants(a, key, l, 30, clock.Add(3*time.Second))
	x.Wants(b, key, l, 12.5, clock.Add(5*time.Second))
	x.Asked([]limit.Bucket{{Key: key, Limit: l, Hits: 4}})
	steps := []struct {
		after time.Duration
		do    func()
		want  float64
	}{
		{0, nil, 30 + 12.5 + 4},
		{time.Second, nil, 42.5}, // the hits asked were the last interval's
		{time.Second, func() { x.Wants(a, key, l, 20, clock.Add(2*time.Second)) }, 32.5}, // a's new rate replaces its old
		{2 * time.Second, nil, 12.5},                     // a lapsed
		{0, func() { x.Wants(b, key, l, 0, clock) }, -1}, // b withdrawn: nothing asked, not reported
	}
	for i, s := range steps {
		clock = clock.Add(s.after)
		if s.do != nil {
			s.do()
		}
		if got := demand(); math.Abs(got-s.want) > 1e-9 {
			t.Errorf("step %d: demand %v, want %v", i, got, s.want)
		}
	}
	x.uses.Range(func(_, v any) bool {
		if n := len(v.(*use).wants); n != 0 {
			t.Errorf("%d standing demands left, want none", n)
		}
		return true
	})
}

// cuttableBoard is a peer's store behind a link that can be cut: while
// cut, nothing reaches it.
type cuttableBoard struct {
	Board
	cut bool
}

func (b *cuttableBoard) ExchangeReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	if b.cut {
		return nil, errors.New("the link is cut")
	}
	return b.Board.ExchangeReport(ctx, now, field, report, ttl)
}

// TestUndeliveredPeerIsLate: from the third exchange eu's reports cannot
// reach us's store, while us's reach eu's (a link cut one way). us counts eu late; eu, hearing
// us, counts it late too, since us does not hear it: neither takes more
// than it held.
func TestUndeliveredPeerIsLate(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	euBoard, usBoard := newMemBoard(), newMemBoard()
	link := &cuttableBoard{Board: usBoard}
	eu, err := New(Options{Region: "eu", Regions: []string{"eu", "us"}, Own: euBoard, Peers: map[string]Board{"us": link},
		Interval: time.Second, Silence: time.Minute, Clock: now})
	if err != nil {
		t.Fatal(err)
	}
	us, err := New(Options{Region: "us", Regions: []string{"eu", "us"}, Own: usBoard, Peers: map[string]Board{"eu": euBoard},
		Interval: time.Second, Silence: time.Minute, Clock: now})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	ctx := context.Background()
	start := clock.Unix()
	for epoch := start; epoch < start+5; epoch++ {
		clock = time.Unix(epoch, 0)
		link.cut = epoch >= start+2
		for _, x := range []*Exchange{eu, us} {
			x.Asked([]limit.Bucket{{Key: "api|user=u", Limit: l, Hits: 10}})
			if err := x.Publish(ctx, epoch-1, clock); err != nil {
				t.Fatal(err)
			}
		}
		clock = clock.Add(500 * time.Millisecond)
		for _, x := range []*Exchange{eu, us} {
			if err := x.Divide(ctx, epoch, clock); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		x            *Exchange
		other, state string
	}{{eu, "us", "late"}, {us, "eu", "late"}} {
		for _, s := range c.x.Statuses() {
			if s.Region == c.other && s.State != c.state {
				t.Errorf("%s counts %s %s, want %s", c.x.opts.Region, s.Region, s.State, c.state)
			}
		}
	}
}
