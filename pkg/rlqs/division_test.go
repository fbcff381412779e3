package rlqs

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestFillSortedIsFillGroups: the binary search a join uses finds the
// level the one-pass division finds, with the newcomers as subscribers
// wanting all they can get.
func TestFillSortedIsFillGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for step := range 3000 {
		rate := rng.Float64() * 1000
		var gs []Group
		for range rng.IntN(20) {
			d := rng.Float64() * 300
			switch rng.IntN(8) {
			case 0:
				d = math.Inf(1)
			case 1:
				d = 0
			}
			gs = append(gs, Group{Count: float64(1 + rng.IntN(4)), Sum: d * float64(1+rng.IntN(4))})
		}
		extra := rng.IntN(4)
		pts := make([]point, len(gs))
		for i, g := range gs {
			pts[i] = point{g.demand(), g.Count}
		}
		slices.SortFunc(pts, func(a, b point) int { return cmpFloat(a.demand, b.demand) })
		got := fillSorted(rate, pts, runningSums(nil, pts, false), runningSums(nil, pts, true), float64(extra))
		all := slices.Clone(gs)
		for range extra {
			all = append(all, Group{Count: 1, Sum: math.Inf(1)})
		}
		want := FillGroups(rate, all)
		if got != want && math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Fatalf("step %d: fillSorted(%v, %v, extra %d) = %v, FillGroups = %v", step, rate, gs, extra, got, want)
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestRecordGroups: a record of any number of subscribers holds at most
// maxGroups groups; divided by them, the level is never above the exact
// one (shares never add up to more than the rate), and at most a group's
// width (9%) below it.
func TestRecordGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for step := range 300 {
		rate := 1 + rng.Float64()*10000
		n := 1 + rng.IntN(20000)
		demands := make([]float64, n)
		for i := range demands {
			switch rng.IntN(10) {
			case 0:
				demands[i] = math.Inf(1)
			case 1:
				demands[i] = rate * 1e-9
			default:
				demands[i] = rate * math.Exp(-rng.Float64()*12) // spread over many octaves
			}
		}
		exact := FillLevel(rate, demands)
		gs := groupDemands(slices.Clone(demands), rate)
		if len(gs) > maxGroups || (n <= exactGroups && len(gs) != n) {
			t.Fatalf("step %d: %d demands in %d groups", step, n, len(gs))
		}
		count := 0.0
		for _, g := range gs {
			count += g.Count
		}
		if count != float64(n) {
			t.Fatalf("step %d: groups count %v subscribers of %d", step, count, n)
		}
		got := FillGroups(rate, slices.Clone(gs))
		if got > exact*(1+1e-9) || (!math.IsInf(exact, 1) && got < 0.9*exact) {
			t.Fatalf("step %d: %d demands: level %v over groups, %v exact", step, n, got, exact)
		}
	}
}

// TestRecordRoundTrip: a record reads back as written, +Inf included;
// anything else is an error, never a panic.
func TestRecordRoundTrip(t *testing.T) {
	r := &Record{Active: 1_800_000_000_000_000, Groups: []Group{{1, 2.5}, {300, math.Inf(1)}, {1 << 30, 1e9}}}
	got, err := parseRecord(string(appendRecord(nil, r)))
	if err != nil || got.Active != r.Active || fmt.Sprint(got.Groups) != fmt.Sprint(r.Groups) {
		t.Fatalf("%+v, %v; want %+v", got, err, r)
	}
	many := &Record{}
	for range maxGroups + 1 {
		many.Groups = append(many.Groups, Group{1, 1})
	}
	enc := string(appendRecord(nil, r))
	for name, s := range map[string]string{
		"empty": "", "another version": "\x02" + enc[1:], "cut activity": enc[:5], "cut group": enc[:len(enc)-1],
		"too many groups": string(appendRecord(nil, many)),
	} {
		if _, err := parseRecord(s); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestDivisionOnFixedInstants steps a level divided at most every 500ms:
// a newcomer lowers the level at once; a demand that falls lowers its
// share at once and frees it at the next division; one that rises waits
// for the next division.
func TestDivisionOnFixedInstants(t *testing.T) {
	m := NewMemoryRegistry(500 * time.Millisecond)
	t0 := time.Unix(1_800_000_000, 0)
	const level = "api|u=a"
	steps := []struct {
		at       time.Duration
		instance string
		demand   float64
		want     float64
	}{
		{0, "a", math.Inf(1), 100},
		{100 * time.Millisecond, "b", math.Inf(1), 50}, // joins: counted at once
		{100 * time.Millisecond, "a", math.Inf(1), 50},
		{200 * time.Millisecond, "a", 10, 10},                  // falls: at once
		{300 * time.Millisecond, "b", math.Inf(1), 50},         // not freed yet
		{600 * time.Millisecond, "b", math.Inf(1), 90},         // the next division
		{700 * time.Millisecond, "a", 80, 10},                  // rises: waits
		{900 * time.Millisecond, "b", 70, 70},                  // b wants less: at once
		{1100 * time.Millisecond, "a", 80, 50},                 // divided: 80 and 70 share it evenly
		{1200 * time.Millisecond, "c", math.Inf(1), 100.0 / 3}, // a third joiner: an equal part at once
	}
	for i, s := range steps {
		es := []Entry{{Level: level, Instance: s.instance, Rate: 100, Demand: s.demand}}
		if err := m.Publish(context.Background(), t0.Add(s.at), time.Minute, es); err != nil {
			t.Fatal(err)
		}
		if math.Abs(es[0].Share-s.want) > 1e-9 {
			t.Fatalf("step %d (%s at %v): share %v, want %v", i, s.instance, s.at, es[0].Share, s.want)
		}
	}
}

// TestDivisionNeverOvercommits: random joins, leaves, expiries and
// demands on a level divided every 500ms: at every instant, the shares
// its subscribers would read add up to no more than the rate.
func TestDivisionNeverOvercommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m := NewMemoryRegistry(500 * time.Millisecond)
	t0 := time.Unix(1_800_000_000, 0)
	const level, rate = "api|u=a", 100.0
	now := t0
	for step := range 5000 {
		now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		inst := fmt.Sprintf("s%d", rng.IntN(30))
		switch rng.IntN(10) {
		case 0:
			_ = m.Withdraw(context.Background(), inst, []string{level})
		default:
			d := rng.Float64() * 60
			if rng.IntN(5) == 0 {
				d = math.Inf(1)
			}
			ttl := time.Duration(1+rng.IntN(5)) * time.Second
			if err := m.Publish(context.Background(), now, ttl, []Entry{{Level: level, Instance: inst, Rate: rate, Demand: d}}); err != nil {
				t.Fatal(err)
			}
		}
		sum, ok := m.Summary(level, -1)
		if !ok {
			continue
		}
		total := 0.0
		for _, s := range sum.Largest {
			total += s.Share
		}
		if total > rate*(1+1e-9) {
			t.Fatalf("step %d at %v: shares add up to %v of %v: %+v", step, now.Sub(t0), total, rate, sum.Largest)
		}
	}
}

// TestHolders: subscribers added, found, removed and kept, across the
// length from which they are indexed, always agree with a map.
func TestHolders(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var hs holders
	want := map[string]*held{}
	for step := range 20000 {
		inst := fmt.Sprintf("i%d", rng.IntN(24))
		switch rng.IntN(4) {
		case 0, 1:
			if hs.get(inst) == nil {
				h := &held{instance: inst}
				hs.add(h)
				want[inst] = h
			}
		case 2:
			if hs.remove(inst) != (want[inst] != nil) {
				t.Fatalf("step %d: remove(%s) disagrees", step, inst)
			}
			if h := want[inst]; h != nil && !h.gone {
				t.Fatalf("step %d: %s removed but not marked gone", step, inst)
			}
			delete(want, inst)
		default:
			drop := rng.IntN(24)
			hs.keep(func(h *held) bool { return h.instance != fmt.Sprintf("i%d", drop) })
			delete(want, fmt.Sprintf("i%d", drop))
		}
		if hs.len() != len(want) {
			t.Fatalf("step %d: %d held, want %d", step, hs.len(), len(want))
		}
		for inst, h := range want {
			if hs.get(inst) != h {
				t.Fatalf("step %d: %s not found", step, inst)
			}
		}
		if (hs.index != nil) != (hs.len() > indexFrom) {
			t.Fatalf("step %d: %d held, indexed %v", step, hs.len(), hs.index != nil)
		}
	}
}
