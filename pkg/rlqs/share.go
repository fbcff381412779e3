package rlqs

import (
	"math"
	"slices"
)

// Divide splits rate (requests per second) among subscribers by their
// demands, max-min fair: a subscriber that wants less than an equal share
// of what is left gets what it wants, and what it leaves goes to the
// others, in equal parts. shares[i] is subscriber i's part; they add up to
// at most rate, and to rate exactly when the demands together ask for at
// least that much. A demand of +Inf (not known yet) takes an equal part
// of what the smaller demands leave; a negative or NaN demand counts as
// 0. Divide is pure; shares must have len(demands) places.
func Divide(rate float64, demands, shares []float64) {
	n := len(demands)
	if n == 0 {
		return
	}
	if !(rate > 0) {
		clear(shares[:n])
		return
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	want := func(i int) float64 {
		d := demands[i]
		if !(d > 0) { // NaN, 0 and below
			return 0
		}
		return d
	}
	slices.SortFunc(order, func(a, b int) int {
		switch da, db := want(a), want(b); {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return a - b // the same demand: in order, so that the division is stable
	})
	left := rate
	for k, i := range order {
		equal := left / float64(n-k)
		share := math.Min(want(i), equal)
		shares[i] = share
		left = math.Max(left-share, 0)
	}
}

// Split divides an integer budget (a limit's room, in requests) among
// subscribers in proportion to their shares of a rate: part i is
// floor(budget × shares[i] / rate), so that the parts never add up to
// more than the budget. It is what each subscriber may burst. Split is
// pure; parts must have len(shares) places.
func Split(budget int64, rate float64, shares []float64, parts []int64) {
	for i, s := range shares {
		parts[i] = 0
		if budget > 0 && rate > 0 && s > 0 {
			parts[i] = int64(math.Floor(float64(budget) * math.Min(s/rate, 1)))
		}
	}
}
