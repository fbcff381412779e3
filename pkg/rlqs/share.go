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
	if len(demands) == 0 {
		return
	}
	level := FillLevel(rate, slices.Clone(demands))
	for i, d := range demands {
		shares[i] = math.Min(want(d), level)
	}
}

// FillLevel returns the level of a max-min fair division of rate among
// demands: each subscriber's share is the smaller of its demand and the
// level, +Inf when the demands together ask for no more than rate (each
// gets its demand), 0 when rate is not above 0. Only one sort of the
// demands' numbers: a subscriber wanting its own share needs no other's
// share, nor names. It sorts demands in place; a negative or NaN demand
// counts as 0, +Inf as wanting all it can get.
func FillLevel(rate float64, demands []float64) float64 {
	if !(rate > 0) {
		return 0
	}
	for i, d := range demands {
		demands[i] = want(d)
	}
	slices.Sort(demands)
	left := rate
	for k, d := range demands {
		equal := left / float64(len(demands)-k)
		if d >= equal {
			return equal
		}
		left -= d
	}
	return math.Inf(1)
}

// want is what a demand asks for: NaN, 0 and below ask for nothing.
func want(d float64) float64 {
	if !(d > 0) {
		return 0
	}
	return d
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
