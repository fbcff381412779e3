package region

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestDivideTable steps Divide through fixed cases, a limit of 60 (size)
// and 60/s (rate) unless a case says otherwise.
func TestDivideTable(t *testing.T) {
	fresh := func(demand, usage float64) View { return View{State: Fresh, Demand: demand, Usage: usage} }
	third := 1.0 / 3
	for _, c := range []struct {
		name        string
		size, rate  float64
		views       []View
		sizes, shas []float64
	}{
		{
			// The issue's three regions: 60, 30 and 10 a second of 60.
			// Max-min: the 10 keeps 10/60; 60 and 30 split the other 50.
			name: "unequal demands", size: 60, rate: 60,
			views: []View{fresh(60, 0), fresh(30, 0), fresh(10, 0)},
			sizes: []float64{25, 25, 10}, shas: []float64{25.0 / 60, 25.0 / 60, 10.0 / 60},
		},
		{
			// Demands that fit leave the rest in equal parts.
			name: "demands fit", size: 60, rate: 60,
			views: []View{fresh(12, 0), fresh(6, 0), fresh(3, 0)},
			sizes: []float64{12 + 13, 6 + 13, 3 + 13}, shas: []float64{25.0 / 60, 19.0 / 60, 16.0 / 60},
		},
		{
			// No demand anywhere: an equal split.
			name: "idle", size: 60, rate: 60,
			views: []View{fresh(0, 0), fresh(0, 0), fresh(0, 0)},
			sizes: []float64{20, 20, 20}, shas: []float64{third, third, third},
		},
		{
			// One region busy, two idle: each idle one keeps an idle share
			// (a twentieth of an equal third).
			name: "one busy", size: 60, rate: 60,
			views: []View{fresh(100, 0), fresh(0, 0), fresh(0, 0)},
			sizes: []float64{60 * (1 - 2.0/60), 1, 1}, shas: []float64{1 - 2.0/60, 1.0 / 60, 1.0 / 60},
		},
		{
			// Usage: each wants the larger of its demand and the drain
			// of what it counts (60/60 each): 0.4917 each of the rate,
			// and of the size 29.5. The first counts 30, above: it
			// keeps half the excess. The room (60 - 45) goes to those
			// short of their fair size, 14.5 and 1.
			name: "usage", size: 60, rate: 60,
			views: []View{fresh(60, 30), fresh(60, 15), fresh(0, 0)},
			// Whole: 29.75, 29.03 and 0.97 round to 29, 29 and 1.
			sizes: []float64{29, 29, 1},
			shas:  []float64{0.4916666666666667, 0.4916666666666667, 1.0 / 60},
		},
		{
			// Counts that are a demand's bursts (Envoys' usage charged
			// once a report) do not add to it: us wants 10/60, not 10/60
			// + 7/60, and eu gets the rest, 50, as the demands alone say.
			// The room goes to those short of their fair size.
			name: "bursts below demand", size: 60, rate: 60,
			views: []View{fresh(80, 26), fresh(10, 7)},
			sizes: []float64{50, 10}, shas: []float64{50.0 / 60, 10.0 / 60},
		},
		{
			// A stopped region's count: it wants the rate that drains it
			// as a full bucket drains, 30/60, and gives it back at once.
			name: "stopped with a count", size: 60, rate: 60,
			views: []View{fresh(100, 10), fresh(0, 30)},
			sizes: []float64{30, 30}, shas: []float64{0.5, 0.5},
		},
		{
			// A debt past the size (usage charged always): no room; the
			// one above its fair 30 keeps half its excess.
			name: "debt", size: 60, rate: 60,
			views: []View{fresh(60, 50), fresh(60, 30)},
			sizes: []float64{40, 30}, shas: []float64{0.5, 0.5},
		},
		{
			// A late region keeps its claim; the fresh ones divide the
			// rest: two thirds of the rate, 40 of the size.
			name: "late", size: 60, rate: 60,
			views: []View{fresh(100, 0), fresh(0, 0), {State: Late, Held: Claim{Size: 20, Share: third}}},
			sizes: []float64{40 * 0.975, 40 * 0.025, 20}, shas: []float64{0.65, 2.0 / 3 / 40, third},
		},
		{
			// A gone region's claim is given back.
			name: "gone", size: 60, rate: 60,
			views: []View{fresh(100, 0), fresh(100, 0), {State: Gone, Held: Claim{Size: 20, Share: third}}},
			sizes: []float64{30, 30, 0}, shas: []float64{0.5, 0.5, 0},
		},
		{
			// Late claims that take it all leave the fresh ones nothing:
			// what they count drains, half an exchange at a time.
			name: "all held", size: 60, rate: 60,
			views: []View{fresh(100, 5), {State: Late, Held: Claim{Size: 60, Share: 1}}},
			sizes: []float64{2, 60}, shas: []float64{0, 1},
		},
		{
			// A limit of 1 among three idle regions: one region has it,
			// not none (each third rounded down would be 0).
			name: "one", size: 1, rate: 1.0 / 60,
			views: []View{fresh(0, 0), fresh(0, 0), fresh(0, 0)},
			sizes: []float64{1, 0, 0}, shas: []float64{third, third, third},
		},
		{
			// A deny-all limit: no size to divide.
			name: "zero", size: 0, rate: 0,
			views: []View{fresh(10, 0), fresh(0, 0)},
			sizes: []float64{0, 0}, shas: []float64{0.5, 0.5},
		},
		{
			// Every region late or gone: nothing to divide.
			name: "none fresh", size: 60, rate: 60,
			views: []View{{State: Late, Held: Claim{Size: 30, Share: 0.5}}, {State: Gone}},
			sizes: []float64{30, 0}, shas: []float64{0.5, 0},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			claims := make([]Claim, len(c.views))
			Divide(c.size, c.rate, c.views, claims)
			for i, cl := range claims {
				if math.Abs(cl.Size-c.sizes[i]) > 1e-9 || math.Abs(cl.Share-c.shas[i]) > 1e-9 {
					t.Errorf("region %d: %+v, want size %v share %v", i, cl, c.sizes[i], c.shas[i])
				}
			}
		})
	}
}

// TestDivideAddsUp: for any views whose held claims fit in the limit, the
// claims' shares add up to one, and what the regions may count (for each
// Fresh one the more of its claim and what it counts: a claim under what
// it counts admits nothing until it drains below) to no more than the
// limit's size, or what they count if that is more; no claim is negative,
// and a Fresh region's claim is at least its fair part or what it counts.
func TestDivideAddsUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20000 {
		size := float64(rng.IntN(1000))
		rate := rng.Float64() * 1000
		n := 1 + rng.IntN(6)
		views := make([]View, n)
		heldSize, heldShare := 0.0, 0.0
		usage := 0.0
		for i := range views {
			switch r := rng.IntN(10); {
			case r < 6 || i == 0:
				views[i] = View{State: Fresh, Demand: rng.Float64() * 2 * rate, Usage: rng.Float64() * size / float64(n)}
				if rng.IntN(5) == 0 {
					views[i].Demand = 0
				}
				usage += views[i].Usage
			case r < 8:
				h := Claim{Size: rng.Float64() * (size - heldSize) / 2, Share: rng.Float64() * (1 - heldShare) / 2}
				views[i] = View{State: Late, Held: h}
				heldSize += h.Size
				heldShare += h.Share
			default:
				views[i] = View{State: Gone}
			}
		}
		claims := make([]Claim, n)
		Divide(size, rate, views, claims)
		sumSize, sumShare := 0.0, 0.0
		for i, c := range claims {
			if c.Size < 0 || c.Share < 0 {
				t.Fatalf("round %d: a negative claim %+v of %+v", round, c, views)
			}
			reach := c.Size
			if views[i].State == Fresh {
				reach = max(c.Size, math.Floor(views[i].Usage)) // a bucket counts whole requests
				fair := max(size-heldSize, 0) * c.Share / (1 - heldShare)
				if c.Size < min(views[i].Usage, fair)-1 {
					t.Fatalf("round %d: region %d claims %v, less than both the %v it counts and its fair %v", round, i, c.Size, views[i].Usage, fair)
				}
			}
			sumSize += reach
			sumShare += c.Share
		}
		if most := max(size, heldSize+usage); sumSize > most+1e-6 {
			t.Fatalf("round %d: the regions may count %v in all, more than %v: %+v -> %+v", round, sumSize, most, views, claims)
		}
		if math.Abs(sumShare-1) > 1e-9 {
			t.Fatalf("round %d: shares add up to %v, want 1: %+v -> %+v", round, sumShare, views, claims)
		}
	}
}

// TestScale: a region's own limit under its claim: the size rounded down,
// a leaky bucket's drip slowed to its share (rounded up to a whole
// microsecond, never faster than the limit's), a window's size only.
func TestScale(t *testing.T) {
	leakyLimit := limit.Limit{Size: 60, DripRate: time.Second / 60, DripSize: 1}
	window := limit.Limit{Algorithm: limit.FixedWindow, Size: 1000, Window: time.Hour}
	for _, c := range []struct {
		in    limit.Limit
		claim Claim
		want  limit.Limit
	}{
		{leakyLimit, Claim{Size: 25.9, Share: 0.25}, limit.Limit{Size: 25, DripRate: 66667 * time.Microsecond, DripSize: 1}},
		{leakyLimit, Claim{Size: 60, Share: 1}, leakyLimit},
		{leakyLimit, Claim{Size: 99, Share: 2}, leakyLimit},
		{leakyLimit, Claim{Size: -3, Share: 0}, limit.Limit{Size: 0, DripRate: maxDrip, DripSize: 1}},
		{leakyLimit, Claim{Size: 1, Share: 1e-12}, limit.Limit{Size: 1, DripRate: maxDrip, DripSize: 1}},
		{window, Claim{Size: 333.3, Share: 0.1}, limit.Limit{Algorithm: limit.FixedWindow, Size: 333, Window: time.Hour}},
	} {
		if got := Scale(c.in, c.claim); got != c.want {
			t.Errorf("Scale(%v, %+v) = %+v, want %+v", c.in, c.claim, got, c.want)
		}
	}
}

func ExampleDivide() {
	// Three regions on one limit of 60 a second, asked 60, 30 and 10.
	claims := make([]Claim, 3)
	Divide(60, 60, []View{{Demand: 60}, {Demand: 30}, {Demand: 10}}, claims)
	for _, c := range claims {
		fmt.Printf("size %.0f, %.0f a second\n", c.Size, c.Share*60)
	}
	// Output:
	// size 25, 25 a second
	// size 25, 25 a second
	// size 10, 10 a second
}
