package region

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// The simulation runs regions on one limit in virtual time: each decides
// its requests on a store of its own (the memory store) under its
// claim's limit, publishes a report every interval and works its claims
// out half an interval later, its reports crossing links of a delay each
// way that a scenario may cut. It counts what each region was asked and
// admitted, every 100 ms, to hold the division to its bounds.

const (
	simTick = 10 * time.Millisecond
	simSlot = 100 * time.Millisecond
)

type simRegion struct {
	name   string
	demand func(t time.Duration) float64 // requests a second at t
	store  *memory.Store
	ledger *Ledger
	limit  limit.Limit // its claim's
	claim  Claim
	owed   float64
	asked  float64 // this epoch
	// admitted counts what it admitted in each slot.
	admitted []int
}

type delivery struct {
	at time.Duration
	to int
	r  Report
}

type sim struct {
	t        *testing.T
	limit    limit.Limit
	interval time.Duration
	delay    time.Duration
	silence  int64
	regions  []*simRegion
	// cut says, at t, whether reports from one region to another are lost.
	cut      func(t time.Duration, from, to int) bool
	inflight []delivery
	start    time.Time
}

func newSim(t *testing.T, l limit.Limit, interval, delay time.Duration, demands ...func(time.Duration) float64) *sim {
	s := &sim{t: t, limit: l, interval: interval, delay: delay, silence: 30, start: time.Unix(1_800_000_000, 0),
		cut: func(time.Duration, int, int) bool { return false }}
	var names []string
	for i := range demands {
		names = append(names, fmt.Sprintf("r%d", i))
	}
	for i, d := range demands {
		st, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r := &simRegion{name: names[i], demand: d, store: st}
		r.ledger = NewLedger(r.name, names, s.silence, interval/2)
		// Before any exchange: an equal part, as every region counts it.
		r.claim = Claim{Size: float64(l.Size) / float64(len(demands)), Share: 1 / float64(len(demands))}
		r.limit = Scale(l, r.claim)
		s.regions = append(s.regions, r)
	}
	return s
}

func (s *sim) rate() float64 { return s.limit.PerSecond() }

// run runs the simulation for d.
func (s *sim) run(d time.Duration) { s.runFrom(0, d) }

// runFrom runs the simulation from from to to.
func (s *sim) runFrom(from, to time.Duration) {
	ctx := context.Background()
	bucket := []limit.Bucket{{Key: "api|user=u", Hits: 1}}
	res := make([]limit.Result, 1)
	for t := from; t < to; t += simTick {
		now := s.start.Add(t)
		// Reports arrive.
		rest := s.inflight[:0]
		for _, dl := range s.inflight {
			if dl.at <= t {
				s.regions[dl.to].ledger.Take(dl.r)
			} else {
				rest = append(rest, dl)
			}
		}
		s.inflight = rest
		// Exchanges: reports at each epoch, claims half an interval on.
		if t%s.interval == 0 && t > 0 {
			epoch := int64(t / s.interval)
			for i, r := range s.regions {
				states := make([]limit.State, 1)
				at, err := r.store.State(ctx, now, []limit.Bucket{{Key: bucket[0].Key, Limit: r.limit}}, states)
				if err != nil {
					s.t.Fatal(err)
				}
				rep := Report{Region: r.name, Replica: "0", Epoch: epoch - 1, Buckets: map[uint64]Record{
					KeyHash(bucket[0].Key): {Demand: r.asked / s.interval.Seconds(), Usage: float64(limit.Count(states[0], r.limit, at)),
						Bucket: Bucket{Size: float64(s.limit.Size), Rate: s.rate()}}}}
				r.asked = 0
				r.ledger.Take(rep)
				for j := range s.regions {
					switch {
					case j == i:
					case s.cut(t, i, j):
						r.ledger.Undelivered(s.regions[j].name, epoch-1) // its write failed
					default:
						s.inflight = append(s.inflight, delivery{at: t + s.delay, to: j, r: rep})
					}
				}
			}
		}
		if (t-s.interval/2)%s.interval == 0 && t > s.interval {
			epoch := int64(t / s.interval)
			for _, r := range s.regions {
				key := KeyHash(bucket[0].Key)
				r.claim = r.ledger.Claims(epoch, map[uint64]Bucket{key: {Size: float64(s.limit.Size), Rate: s.rate()}})[key]
				r.limit = Scale(s.limit, r.claim)
				r.ledger.Forget(epoch)
			}
		}
		// Requests.
		slot := int(t / simSlot)
		for _, r := range s.regions {
			for len(r.admitted) <= slot {
				r.admitted = append(r.admitted, 0)
			}
			r.owed += r.demand(t) * simTick.Seconds()
			for ; r.owed >= 1; r.owed-- {
				r.asked++
				bucket[0].Limit = r.limit
				if err := r.store.Apply(ctx, now, bucket, res); err != nil {
					s.t.Fatal(err)
				}
				if res[0].Admitted {
					r.admitted[slot]++
				}
			}
		}
	}
}

// admitted is what region i (or all, i < 0) admitted a second over
// [from, to).
func (s *sim) admitted(i int, from, to time.Duration) float64 {
	n := 0
	for j, r := range s.regions {
		if i >= 0 && j != i {
			continue
		}
		for k := int(from / simSlot); k < int(to/simSlot) && k < len(r.admitted); k++ {
			n += r.admitted[k]
		}
	}
	return float64(n) / (to - from).Seconds()
}

// worst is the most all regions admitted over any span of d from from to
// to, in hits, and when that span began.
func (s *sim) worst(d, from, to time.Duration) (float64, time.Duration) {
	most, at := 0.0, time.Duration(0)
	for t := from; t+d <= to; t += simSlot {
		if n := s.admitted(-1, t, t+d) * d.Seconds(); n > most {
			most, at = n, t
		}
	}
	return most, at
}

// timeline is each second's admissions by region, for a failure.
func (s *sim) timeline(to time.Duration) string {
	var b strings.Builder
	for t := time.Duration(0); t < to; t += time.Second {
		fmt.Fprintf(&b, "\n %3.0fs:", t.Seconds())
		for i := range s.regions {
			fmt.Fprintf(&b, " %5.1f", s.admitted(i, t, t+time.Second))
		}
		fmt.Fprintf(&b, " = %5.1f", s.admitted(-1, t, t+time.Second))
	}
	return b.String()
}

func steady(rate float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return rate }
}

// perSecond is a leaky bucket of n a second: a burst of n, one more each
// 1/n second (rate_limit's translation).
func perSecond(n int64) limit.Limit {
	return limit.Rate{RequestsPerUnit: uint32(n), Unit: limit.Second}.Limit()
}

// TestSimSteady: three regions asked 60, 30 and 10 a second of one limit
// of 60 a second, links of 50 ms each way. Together they admit within 10%
// of the limit, each at least 80% of its max-min fair share (25, 25, 10),
// and no 5 s admits more than one bucket of the limit would (its size and
// 5 s of its rate).
func TestSimSteady(t *testing.T) {
	l := perSecond(60)
	s := newSim(t, l, time.Second, 50*time.Millisecond, steady(60), steady(30), steady(10))
	s.run(30 * time.Second)
	fair := []float64{25, 25, 10}
	total := s.admitted(-1, 10*time.Second, 30*time.Second)
	t.Logf("together %.1f/s; per second:%s", total, s.timeline(30*time.Second))
	if math.Abs(total-60) > 6 {
		t.Errorf("together %.1f/s, not within 10%% of 60", total)
	}
	for i := range s.regions {
		if got := s.admitted(i, 10*time.Second, 30*time.Second); got < 0.8*fair[i] {
			t.Errorf("region %d: %.1f/s, below 80%% of its fair %v", i, got, fair[i])
		}
	}
	if most, at := s.worst(5*time.Second, 0, 30*time.Second); most > 60+5*60 {
		t.Errorf("%v admitted in the 5 s from %v, more than one bucket allows (%v)", most, at, 60+5*60)
	}
}

// step is a demand that is before until at, and after from then on.
func step(before, after float64, at time.Duration) func(time.Duration) float64 {
	return func(t time.Duration) float64 {
		if t < at {
			return before
		}
		return after
	}
}

// checkBound fails t if over any span of d from from to to all regions
// admitted more than one bucket of the limit allows in d, and extra.
func checkBound(t *testing.T, s *sim, d, from, to time.Duration, extra float64) {
	t.Helper()
	allowed := float64(s.limit.Size) + s.rate()*d.Seconds() + extra
	most, at := s.worst(d, from, to)
	t.Logf("the most in any %v from %v to %v: %.0f (one bucket: %.0f, and %.0f more allowed)", d, from, to, most, allowed-extra, extra)
	if most > allowed {
		t.Errorf("%.0f admitted in the %v from %v, more than %.0f", most, d, at, allowed)
	}
}

// TestSimShift: a limit of 60 a second, links of 50 ms. Region 0 is asked
// 60 a second and region 2 nothing until 20 s, then the other way round;
// region 1 is asked 30 throughout. Within 5 s region 2 has at least 80% of
// its fair share (30), and no 5 s is over one bucket's bound.
func TestSimShift(t *testing.T) {
	s := newSim(t, perSecond(60), time.Second, 50*time.Millisecond, step(60, 0, 20*time.Second), steady(30), step(0, 60, 20*time.Second))
	s.run(40 * time.Second)
	t.Logf("per second:%s", s.timeline(40*time.Second))
	checkBound(t, s, 5*time.Second, 0, 40*time.Second, 0)
	if got := s.admitted(2, 25*time.Second, 30*time.Second); got < 0.8*30 {
		t.Errorf("region 2 had %.1f/s from 5 s after its demand rose, below 80%% of its fair 30", got)
	}
	if got := s.admitted(-1, 25*time.Second, 40*time.Second); math.Abs(got-60) > 6 {
		t.Errorf("together %.1f/s after the shift, not within 10%% of 60", got)
	}
}

// TestSimCut: the links between region 0 and the others are cut from 20 s
// to 40 s, while region 1's demand rises from 30 to 60 at 25 s. Region 0
// keeps deciding on its claim, the others divide the rest: no 5 s is over
// one bucket's bound; 5 s after the links heal, the shares are fair again.
func TestSimCut(t *testing.T) {
	s := newSim(t, perSecond(60), time.Second, 50*time.Millisecond, steady(60), step(30, 60, 25*time.Second), steady(10))
	s.cut = func(t time.Duration, from, to int) bool {
		return t >= 20*time.Second && t < 40*time.Second && (from == 0) != (to == 0)
	}
	s.run(60 * time.Second)
	t.Logf("per second:%s", s.timeline(60*time.Second))
	checkBound(t, s, 5*time.Second, 0, 60*time.Second, 0)
	fair := []float64{25, 25, 10}
	for i := range s.regions {
		if got := s.admitted(i, 45*time.Second, 60*time.Second); got < 0.8*fair[i] {
			t.Errorf("region %d: %.1f/s from 5 s after the heal, below 80%% of its fair %v", i, got, fair[i])
		}
	}
}

// TestSimSilence: the links of region 0 are cut for longer than a region
// may be silent (5 exchanges here). Until then the others leave it its
// claim; after, they give it back to themselves, while region 0, cut
// off, goes on with its own: together over one bucket's bound by no more
// than region 0's claim (its size, and its share of the rate over the
// span), until the links heal.
func TestSimSilence(t *testing.T) {
	s := newSim(t, perSecond(60), time.Second, 50*time.Millisecond, steady(60), steady(60), steady(60))
	for _, r := range s.regions {
		r.ledger.silence = 5
	}
	s.cut = func(t time.Duration, from, to int) bool {
		return t >= 20*time.Second && t < 40*time.Second && (from == 0) != (to == 0)
	}
	s.run(60 * time.Second)
	t.Logf("per second:%s", s.timeline(60*time.Second))
	checkBound(t, s, 5*time.Second, 0, 27*time.Second, 0)
	checkBound(t, s, 5*time.Second, 0, 60*time.Second, 20+20*5)
	if got := s.admitted(-1, 45*time.Second, 60*time.Second); math.Abs(got-60) > 6 {
		t.Errorf("together %.1f/s after the heal, not within 10%% of 60", got)
	}
}

// TestSimDelays: links of 50 to 450 ms each way, under half the interval:
// every report is in time, and no 5 s is over one bucket's bound while
// the demand moves; links slower than that leave every report late, and
// the claims stay what they were.
func TestSimDelays(t *testing.T) {
	for _, d := range []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, 450 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			s := newSim(t, perSecond(60), time.Second, d, step(60, 0, 20*time.Second), steady(30), step(0, 60, 20*time.Second))
			s.run(40 * time.Second)
			checkBound(t, s, 5*time.Second, 0, 40*time.Second, 0)
			if got := s.admitted(2, 25*time.Second, 30*time.Second); got < 0.8*30 {
				t.Errorf("region 2 had %.1f/s from 5 s after its demand rose, below 80%% of its fair 30", got)
			}
		})
	}
}

// TestSimWindows: a fixed window of 600 every 10 s, demand moving from
// region 0 to region 2 in the middle of a window: no window admits more
// than 600 in all.
func TestSimWindows(t *testing.T) {
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 600, Window: 10 * time.Second}
	s := newSim(t, l, time.Second, 50*time.Millisecond, step(100, 0, 25*time.Second), steady(30), step(0, 100, 25*time.Second))
	s.run(60 * time.Second)
	t.Logf("per second:%s", s.timeline(60*time.Second))
	for w := time.Duration(0); w < 60*time.Second; w += 10 * time.Second {
		got := s.admitted(-1, w, w+10*time.Second) * 10
		t.Logf("window from %v: %.0f admitted", w, got)
		if got > 600 {
			t.Errorf("the window from %v admitted %.0f, more than its 600", w, got)
		}
		if w >= 30*time.Second && got < 0.9*600 {
			t.Errorf("the window from %v admitted %.0f, under 90%% of its 600 with demand to spare", w, got)
		}
	}
}

// TestSimBursts: demand that jumps from nothing to far past the limit in
// the middle of an interval, in turn in each region, on a leaky bucket
// and a fixed window. What a region admits between an epoch's reports
// and the claims made of them is counted at the pace it was asked the
// epoch before: a jump is not, and the regions may go over by what the
// region that jumped admits in that half interval beyond its pace, at
// most its claim's room. Measured here: within one bucket's bound.
func TestSimBursts(t *testing.T) {
	burst := func(at time.Duration) func(time.Duration) float64 {
		return func(t time.Duration) float64 {
			if t >= at && t < at+3*time.Second {
				return 1000
			}
			return 5
		}
	}
	for _, l := range []limit.Limit{perSecond(60), {Algorithm: limit.FixedWindow, Size: 600, Window: 10 * time.Second}} {
		t.Run(l.String(), func(t *testing.T) {
			s := newSim(t, l, time.Second, 50*time.Millisecond, burst(20300*time.Millisecond), burst(30700*time.Millisecond), steady(30))
			s.run(60 * time.Second)
			t.Logf("per second:%s", s.timeline(60*time.Second))
			if l.Algorithm == limit.FixedWindow {
				for w := time.Duration(0); w < 60*time.Second; w += 10 * time.Second {
					if got := s.admitted(-1, w, w+10*time.Second) * 10; got > 600 {
						t.Errorf("the window from %v admitted %.0f, more than its 600", w, got)
					}
				}
				return
			}
			checkBound(t, s, 5*time.Second, 0, 60*time.Second, 0)
			checkBound(t, s, time.Second, 0, 60*time.Second, 0)
		})
	}
}

// TestSimOneLinkCut: only the link between regions 0 and 2 is cut, from
// 20 s to 50 s; region 1 hears both. Each region is asked 30 a second of
// 60, then region 0 90 and region 2 5 from 25 s. While a region is late
// no region's claim grows, so those that hear it and those that do not
// stay within the limit together.
func TestSimOneLinkCut(t *testing.T) {
	s := newSim(t, perSecond(60), time.Second, 50*time.Millisecond, step(30, 90, 25*time.Second), steady(30), step(30, 5, 25*time.Second))
	s.cut = func(t time.Duration, from, to int) bool {
		return t >= 20*time.Second && t < 50*time.Second && from+to == 2 && from != to
	}
	s.run(60 * time.Second)
	t.Logf("per second:%s", s.timeline(60*time.Second))
	checkBound(t, s, 5*time.Second, 0, 60*time.Second, 0)
}

// TestSimOneWayCut: from 20 s to 40 s region 0's reports no longer reach
// region 1 (region 1's still reach region 0, and region 2 hears both),
// while region 0's demand rises from 10 to 60 at 25 s. Region 1, not
// hearing region 0, leaves it the claim it held; region 0, hearing
// everyone, must not take more on its own: a region whose report a peer
// did not take counts that peer as late, as the peer counts it. No 15 s
// is over one bucket's bound.
func TestSimOneWayCut(t *testing.T) {
	s := newSim(t, perSecond(60), time.Second, 50*time.Millisecond, step(10, 60, 25*time.Second), steady(30), steady(30))
	s.cut = func(t time.Duration, from, to int) bool {
		return t >= 20*time.Second && t < 40*time.Second && from == 0 && to == 1
	}
	s.run(60 * time.Second)
	t.Logf("per second:%s", s.timeline(60*time.Second))
	checkBound(t, s, 15*time.Second, 0, 60*time.Second, 0)
	fair := []float64{20, 20, 20}
	for i := range s.regions {
		if got := s.admitted(i, 45*time.Second, 60*time.Second); got < 0.8*fair[i] {
			t.Errorf("region %d: %.1f/s from 5 s after the heal, below 80%% of its fair %v", i, got, fair[i])
		}
	}
}

// TestSimPartialCut: from 20 s to 40 s regions 0 and 1 do not hear each
// other, both hearing region 2 and heard by it, while demand moves: region
// 1's falls from 30 to 5 and region 2's rises from 10 to 60 at 25 s.
// Regions 0 and 1 each leave the other its claim; region 2, hearing both,
// divides as if nothing were cut. No 15 s is over one bucket's bound.
func TestSimPartialCut(t *testing.T) {
	for _, c := range []struct {
		name    string
		demands []func(time.Duration) float64
	}{
		{"demand moves to the region that hears both", []func(time.Duration) float64{steady(60), step(30, 5, 25*time.Second), step(10, 60, 25*time.Second)}},
		{"demand moves to a cut region", []func(time.Duration) float64{step(10, 60, 25*time.Second), steady(30), step(60, 10, 25*time.Second)}},
		{"every demand rises", []func(time.Duration) float64{step(10, 60, 25*time.Second), step(10, 60, 25*time.Second), step(10, 60, 25*time.Second)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, perSecond(60), time.Second, 50*time.Millisecond, c.demands...)
			s.cut = func(t time.Duration, from, to int) bool {
				return t >= 20*time.Second && t < 40*time.Second && from+to == 1
			}
			s.run(60 * time.Second)
			t.Logf("per second:%s", s.timeline(60*time.Second))
			checkBound(t, s, 15*time.Second, 0, 60*time.Second, 0)
		})
	}
}
