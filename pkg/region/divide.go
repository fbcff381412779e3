// Package region divides one limit among regions that each decide
// requests on their own store, so that together they keep it.
//
// Each region holds a claim on a limit: a size (the most its own bucket
// may count: a leaky bucket's level, a window's count) and a share of the
// limit's rate (its bucket drains at that part of the rate). While the
// claims' sizes add up to no more than the limit's size and their shares
// to no more than one, the regions together admit no more than one
// bucket of the limit would, whatever each admits within its claim: the
// sum of their counts never exceeds the limit's size, and their drains
// add up to its rate. What each region counts, and how its claim is cut
// from what no one uses, only decides who gets the room; the sum holds
// whatever they estimate.
//
// Claims are worked out by Divide, one pure function of what every region
// published for the same exchange (its demand, its usage), so that every
// region, reading the same records, works out the same claims. A region
// whose record did not arrive (late, or cut off) keeps the claim it last
// held, and the others divide the rest; one silent past a timeout gives
// its claim back.
package region

import (
	"math"
	"slices"
)

// State is what a region's record says of it at an exchange.
type State int

const (
	// Fresh: its record of the exchange arrived: its demand and usage
	// count.
	Fresh State = iota
	// Late: its record did not arrive (a slow or cut link); it keeps
	// deciding with the claim it last held, which the others leave it.
	Late
	// Gone: silent past the peer timeout; its claim is given back.
	Gone
)

// View is one region as an exchange sees it.
type View struct {
	State State
	// Demand is the hits it was asked a second, admitted or not, over
	// the last exchange's interval (Fresh).
	Demand float64
	// Usage is what its bucket counts (Fresh): a leaky bucket's level, a
	// window's count, in the limit's units.
	Usage float64
	// Pending is what it may have admitted since its usage was read,
	// until the claims take over (Fresh): counted as used, not as wanted.
	Pending float64
	// Held is the claim it last held (Late).
	Held Claim
}

// Claim is what a region may use of a limit until the next exchange.
type Claim struct {
	// Size is the most its bucket may count, in the limit's units.
	Size float64
	// Share is its part of the limit's rate, from 0 to 1.
	Share float64
}

// IdleShare is the part of an equal share a region with no demand still
// gets, so that its first requests pass until the next exchange raises
// it; the others keep the rest.
const IdleShare = 1.0 / 20

// Divide sets claims[i] to region i's claim of a limit of size and rate
// (requests a second), from views of every region at one exchange: a
// Late region keeps its Held claim; a Gone one gets none; the Fresh ones
// divide the rest.
//
// The rate's rest goes to them max-min fair by what each wants: the
// larger of its demand and the rate that would drain what it counts as
// fast as a full bucket drains (so a region that stops being asked gives
// its burst back at once, not at an idle share's pace, while the bursts
// of a steady demand, as Envoys' usage charged once a report, add nothing
// to it); each at least an idle share, what the wants leave in equal
// parts. Each one's fair size is its share
// of the size's rest. What they count stays theirs; the room they leave
// (the rest less what they count) goes first to those below their fair
// size, as far as it, then to all by share. One above its fair size
// keeps half its excess, and gives the other half back as its bucket
// drains, each exchange, until it is down to its fair size.
//
// So the claims add up to the limit: their shares to one, their sizes to
// no more than the size (or what the Fresh ones count, if more), given
// Held claims that did. Divide is pure; claims must have len(views)
// places.
func Divide(size, rate float64, views []View, claims []Claim) {
	heldSize, heldShare, fresh := 0.0, 0.0, 0
	for i, v := range views {
		claims[i] = Claim{}
		switch v.State {
		case Late:
			claims[i] = v.Held
			heldSize += v.Held.Size
			heldShare += v.Held.Share
		case Fresh:
			fresh++
		}
	}
	if fresh == 0 {
		return
	}
	shareLeft := clamp01(1 - heldShare)
	pool := max(size-heldSize, 0)
	divideShares(shareLeft, rate, size, views, claims, fresh)

	// Fair sizes, what is counted, the room and who is short of theirs.
	room, short := pool, 0.0
	for i, v := range views {
		if v.State != Fresh {
			continue
		}
		used := want(v.Usage) + want(v.Pending)
		room -= used
		short += max(fairSize(claims[i].Share, shareLeft, pool, fresh)-used, 0)
	}
	room = max(room, 0)
	toShort := min(room, short)
	extra := room - toShort
	for i, v := range views {
		if v.State != Fresh {
			continue
		}
		fair, used := fairSize(claims[i].Share, shareLeft, pool, fresh), want(v.Usage)+want(v.Pending)
		part := 1 / float64(fresh)
		if shareLeft > 0 {
			part = claims[i].Share / shareLeft
		}
		switch {
		case used > fair:
			claims[i].Size = (used+fair)/2 + extra*part
		case short > 0:
			claims[i].Size = used + toShort*(fair-used)/short + extra*part
		default:
			claims[i].Size = used + extra*part
		}
	}
	wholeSizes(views, claims)
}

// wholeSizes makes the Fresh claims' sizes whole, as a bucket counts
// whole requests, without what they may reach growing: each is rounded
// down, and the units that frees go to those that lost the most (the
// first in order on a tie). A claim under what its region counts (one
// giving back its excess) frees nothing: its region still holds what it
// counts. Rounded down one by one, a limit of 1 would admit nothing in
// any region.
func wholeSizes(views []View, claims []Claim) {
	gives := func(i int) bool {
		return views[i].State == Fresh && claims[i].Size >= want(views[i].Usage)+want(views[i].Pending)
	}
	sum, floors := 0.0, 0.0
	for i := range views {
		if gives(i) {
			sum += claims[i].Size
			floors += math.Floor(claims[i].Size)
		}
	}
	spare := int(math.Floor(sum+1e-9) - floors)
	for ; spare > 0; spare-- {
		best, lost := -1, 1e-12
		for i := range views {
			if gives(i) {
				if f := claims[i].Size - math.Floor(claims[i].Size); f > lost {
					best, lost = i, f
				}
			}
		}
		if best < 0 {
			break
		}
		claims[best].Size = math.Floor(claims[best].Size) + 1
	}
	for i, v := range views {
		if v.State == Fresh {
			claims[i].Size = math.Floor(claims[i].Size + 1e-9)
		}
	}
}

// fairSize is a Fresh region's part of pool by its share of shareLeft
// (an equal part when there is no share to go by).
func fairSize(share, shareLeft, pool float64, fresh int) float64 {
	if shareLeft > 0 {
		return pool * share / shareLeft
	}
	return pool / float64(fresh)
}

// divideShares sets the Share of each Fresh view's claim: left (a part of
// the rate) divided max-min fair by what each wants, a part of the rate:
// the larger of its demand and what it counts over the size (the rate
// that drains it as a full bucket drains); each at least an idle share,
// what the wants leave in equal parts.
func divideShares(left, rate, size float64, views []View, claims []Claim, fresh int) {
	floor := left * IdleShare / float64(fresh)
	// On the stack for a few regions: Divide runs for every bucket at
	// every exchange.
	var buf, sorted [8]float64
	wants := buf[:0]
	if fresh > len(buf) {
		wants = make([]float64, 0, fresh)
	}
	for _, v := range views {
		if v.State == Fresh {
			w := 0.0
			if rate > 0 {
				w = want(v.Demand) / rate
			}
			if size > 0 {
				w = max(w, want(v.Usage)/size)
			}
			wants = append(wants, max(w, floor))
		}
	}
	level := fillLevel(left, append(sorted[:0], wants...))
	given, j := 0.0, 0
	for i, v := range views {
		if v.State == Fresh {
			claims[i].Share = math.Min(wants[j], level)
			given += claims[i].Share
			j++
		}
	}
	spare := max(left-given, 0) / float64(fresh)
	for i, v := range views {
		if v.State == Fresh {
			claims[i].Share += spare
		}
	}
}

// fillLevel is the level of a max-min fair division of total among wants
// (sorting them): each gets the smaller of its want and the level; +Inf
// when they all fit.
func fillLevel(total float64, wants []float64) float64 {
	slices.Sort(wants)
	left := total
	for k, w := range wants {
		equal := left / float64(len(wants)-k)
		if w >= equal {
			return equal
		}
		left -= w
	}
	return math.Inf(1)
}

// want is a demand or usage as a quantity: NaN and below zero are none.
func want(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return x
}

func clamp01(x float64) float64 {
	switch {
	case !(x > 0):
		return 0
	case x > 1:
		return 1
	}
	return x
}
