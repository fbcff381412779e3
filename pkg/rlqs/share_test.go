package rlqs

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestDivide(t *testing.T) {
	inf := math.Inf(1)
	for i, c := range []struct {
		rate    float64
		demands []float64
		want    []float64
	}{
		{100, []float64{50, 50}, []float64{50, 50}},
		{100, []float64{10, 200}, []float64{10, 90}},                  // the small one keeps what it needs
		{100, []float64{10, 30, 200, 200}, []float64{10, 30, 30, 30}}, // the rest, evenly
		{100, []float64{200, 10, 200, 30}, []float64{30, 10, 30, 30}}, // in any order
		{100, []float64{10, 20}, []float64{10, 20}},                   // less than the rate wanted: all of it
		{100, []float64{inf, inf}, []float64{50, 50}},                 // unknown: equal parts
		{100, []float64{20, inf}, []float64{20, 80}},
		{100, []float64{0, 0, inf}, []float64{0, 0, 100}},
		{100, []float64{-5, math.NaN(), 40}, []float64{0, 0, 40}}, // nonsense counts as none
		{0, []float64{10, 10}, []float64{0, 0}},
		{100, nil, nil},
		{1, []float64{1, 1, 1}, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}},
	} {
		got := make([]float64, len(c.demands))
		Divide(c.rate, c.demands, got)
		for j := range got {
			if math.Abs(got[j]-c.want[j]) > 1e-9 {
				t.Errorf("step %d: Divide(%v, %v) = %v, want %v", i, c.rate, c.demands, got, c.want)
				break
			}
		}
	}
}

// TestDivideProperties checks, on random demands, what makes a division
// max-min fair: never more than the rate in all, never more than a
// demand, the rate used up when wanted, and no subscriber below another's
// share unless it got all it wanted.
func TestDivideProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 2000 {
		n := 1 + rng.IntN(12)
		rate := rng.Float64() * 1000
		demands := make([]float64, n)
		total := 0.0
		for i := range demands {
			demands[i] = rng.Float64() * 300
			total += demands[i]
		}
		shares := make([]float64, n)
		Divide(rate, demands, shares)
		sum := 0.0
		for i, s := range shares {
			sum += s
			if s > demands[i]+1e-9 || s < 0 {
				t.Fatalf("step %d: share %v of demand %v", step, s, demands[i])
			}
		}
		if sum > rate+1e-6 || (total >= rate && sum < rate-1e-6) || (total < rate && math.Abs(sum-total) > 1e-6) {
			t.Fatalf("step %d: shares add up to %v of a rate %v, demands %v", step, sum, rate, total)
		}
		for i := range shares {
			for j := range shares {
				if shares[i] < shares[j]-1e-9 && shares[i] < demands[i]-1e-9 {
					t.Fatalf("step %d: %s", step, fmt.Sprint("subscriber ", i, " has ", shares[i], " < ", shares[j], " without getting its demand ", demands[i]))
				}
			}
		}
	}
}

func TestSplit(t *testing.T) {
	for i, c := range []struct {
		budget int64
		rate   float64
		shares []float64
		want   []int64
	}{
		{100, 100, []float64{50, 50}, []int64{50, 50}},
		{100, 100, []float64{10, 90}, []int64{10, 90}},
		{10, 100, []float64{33.4, 33.3, 33.3}, []int64{3, 3, 3}}, // never more than the budget
		{0, 100, []float64{50, 50}, []int64{0, 0}},
		{100, 0, []float64{50}, []int64{0}},
		{100, 100, []float64{200}, []int64{100}},
	} {
		got := make([]int64, len(c.shares))
		Split(c.budget, c.rate, c.shares, got)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("step %d: Split(%d, %v, %v) = %v, want %v", i, c.budget, c.rate, c.shares, got, c.want)
		}
	}
}

func TestFillLevel(t *testing.T) {
	inf := math.Inf(1)
	for i, c := range []struct {
		rate    float64
		demands []float64
		want    float64
	}{
		{100, []float64{10, 200}, 90},
		{100, []float64{200, 10, 30, 200}, 30},
		{100, []float64{10, 20}, inf}, // all wanted fits: no level binds
		{100, []float64{inf, inf}, 50},
		{100, []float64{math.NaN(), -1, inf}, 100},
		{0, []float64{10}, 0},
		{100, nil, inf},
	} {
		if got := FillLevel(c.rate, slices.Clone(c.demands)); got != c.want {
			t.Errorf("step %d: FillLevel(%v, %v) = %v, want %v", i, c.rate, c.demands, got, c.want)
		}
	}
}
