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
	level := FillLevel(rate, demands)
	for i, d := range demands {
		shares[i] = math.Min(want(d), level)
	}
}

// FillLevel returns the level of a max-min fair division of rate among
// demands: each subscriber's share is the smaller of its demand and the
// level, +Inf when the demands together ask for no more than rate (each
// gets its demand), 0 when rate is not above 0. A negative or NaN demand
// counts as 0, +Inf as wanting all it can get. FillLevel is pure.
func FillLevel(rate float64, demands []float64) float64 {
	gs := make([]Group, len(demands))
	for i, d := range demands {
		gs[i] = Group{Count: 1, Sum: d}
	}
	return FillGroups(rate, gs)
}

// Group is subscribers counted together: Count of them, wanting Sum
// requests per second between them (+Inf if any of them wants all it can
// get). In a division a group counts as Count subscribers each wanting
// Sum/Count: never less than its members would take one by one (the
// smaller of Sum and Count × level is at least the sum of the smaller of
// each member's demand and the level), so a level worked out over groups
// is never above the exact one, and shares never add up to more than the
// rate. A replica sends the others its subscribers as a few groups.
type Group struct {
	Count float64
	Sum   float64
}

// demand is what each member of g counts as wanting.
func (g Group) demand() float64 {
	if g.Count <= 0 {
		return 0
	}
	return want(g.Sum) / g.Count
}

// FillGroups returns the fill level of a max-min fair division of rate
// among groups (FillLevel's, each group as Count subscribers alike). It
// sorts groups in place by their members' demand; one pass over them
// after the sort.
func FillGroups(rate float64, groups []Group) float64 {
	if !(rate > 0) {
		return 0
	}
	slices.SortFunc(groups, func(a, b Group) int {
		da, db := a.demand(), b.demand()
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
	count := 0.0
	for _, g := range groups {
		count += max(g.Count, 0)
	}
	left := rate
	for _, g := range groups {
		if !(g.Count > 0) {
			continue
		}
		equal := left / count
		if d := g.demand(); d >= equal {
			return equal
		} else {
			left -= d * g.Count
		}
		count -= g.Count
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
