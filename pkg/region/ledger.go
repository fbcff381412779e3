package region

import (
	"slices"
	"time"
)

// Exchanges run on epochs: every interval, at the same instants in every
// region (multiples of the interval since the Unix epoch, on each
// replica's clock), each replica publishes its report of the interval
// just ended, epoch e-1: for each bucket it used, the hits it was asked
// and what it counts. Half an interval later, when the reports of e-1
// have crossed every link, every replica works out the claims of epoch e
// from the same reports, so that the regions' claims add up to the
// limit. A region whose report of e-1 has not arrived by then is late,
// and keeps the claim it was last worked out to hold.

// Record is one replica's part of one bucket over one epoch.
type Record struct {
	// Demand is the hits it was asked a second, admitted or not.
	Demand float64
	// Usage is what its region's bucket counts of its admissions at the
	// epoch's end: its part of its region's usage.
	Usage float64
	// Bucket is the limit as the replica's config has it.
	Bucket
}

// Report is what one replica published for one epoch: a record for each
// bucket it used, by the bucket key's hash (KeyHash).
type Report struct {
	Region, Replica string
	Epoch           int64
	Buckets         map[uint64]Record
}

// Bucket is a limit as the ledger divides it: its size and its rate (a
// second).
type Bucket struct {
	Size, Rate float64
}

// Ledger keeps, for one replica, the reports the exchanges brought and
// the claims it last worked out for each region, and works out each
// bucket's claims at an exchange. It is not safe for concurrent use: the
// replica's exchange owns it.
type Ledger struct {
	self    int      // Self's place in regions
	regions []string // every region, in one order everywhere
	silence int64    // epochs a region may be silent before it is gone
	// lag is the time, in seconds, from an epoch's reports (their usage)
	// to the claims worked out from them, during which each region still
	// admits under its last claim.
	lag float64
	// reports are the last two reports of each replica, by
	// region/replica: the epoch's, and the next when a replica's clock
	// is ahead.
	reports map[string]*[2]Report
	// heard is the latest epoch each region reported, by its place.
	heard []int64
	// undelivered is, by region place, the last epoch whose report of
	// Self's did not reach that region's store (-1: none).
	undelivered []int64
	// held are the claims last worked out for each bucket, by region
	// place, with the epoch they were worked out at.
	held map[uint64]*heldClaims
	// divided is the epoch of the last claims worked out, and states
	// each region's state then (nil before the first): what the views
	// show.
	divided int64
	states  []State
}

type heldClaims struct {
	claims []Claim
	epoch  int64
	limit  Bucket
}

// NewLedger returns the ledger of a replica of region self, among
// regions (self's included; every replica must be given them in the
// same order), that counts a region silent for more than silence epochs
// gone, and works out claims lag after the reports they are made of.
func NewLedger(self string, regions []string, silence int64, lag time.Duration) *Ledger {
	l := &Ledger{self: -1, regions: regions, silence: max(silence, 1), lag: lag.Seconds(), reports: map[string]*[2]Report{},
		heard: make([]int64, len(regions)), undelivered: make([]int64, len(regions)), held: map[uint64]*heldClaims{}}
	for i, r := range regions {
		if r == self {
			l.self = i
		}
		l.heard[i], l.undelivered[i] = -1, -1
	}
	return l
}

// Take keeps a report an exchange read. A replica's report older than
// the two it has are dropped; one of a region not in the ledger too.
func (l *Ledger) Take(r Report) {
	place := l.place(r.Region)
	if place < 0 {
		return
	}
	key := r.Region + "/" + r.Replica
	two := l.reports[key]
	if two == nil {
		two = &[2]Report{{Epoch: -1}, {Epoch: -1}}
		l.reports[key] = two
	}
	switch {
	case r.Epoch == two[0].Epoch:
		two[0] = r
	case r.Epoch > two[0].Epoch:
		two[1], two[0] = two[0], r
	case r.Epoch == two[1].Epoch:
		two[1] = r
	case r.Epoch > two[1].Epoch:
		two[1] = r
	}
	l.heard[place] = max(l.heard[place], r.Epoch)
}

// Undelivered notes that Self's report of epoch did not reach region's
// store: that region counts Self late, and Self counts it late in turn,
// so that neither takes more than it held while one hears the other and
// the other does not (a link cut one way).
func (l *Ledger) Undelivered(region string, epoch int64) {
	if i := l.place(region); i >= 0 && i != l.self {
		l.undelivered[i] = max(l.undelivered[i], epoch)
	}
}

func (l *Ledger) place(region string) int {
	for i, r := range l.regions {
		if r == region {
			return i
		}
	}
	return -1
}

// Claims works out the claims of epoch epoch from the reports of
// epoch-1, of every bucket they name and of buckets (Self's own, used
// since), and returns Self's, by key hash. A region whose report does not
// name a bucket does not use it: no demand, no usage. A bucket's limit is
// the smallest the fresh reports give (the configs of two regions may
// differ while one changes), or buckets', which Self's config gives.
func (l *Ledger) Claims(epoch int64, buckets map[uint64]Bucket) map[uint64]Claim {
	prev := epoch - 1
	n := len(l.regions)
	states := make([]State, n)
	fresh := 0
	for i := range l.regions {
		switch {
		case i == l.self || l.heard[i] >= prev && l.undelivered[i] < prev:
			states[i] = Fresh
			fresh++
		case l.heard[i] >= prev:
			states[i] = Late // it did not get Self's report: it counts Self late
		case l.heard[i] >= 0 && prev-l.heard[i] <= l.silence:
			states[i] = Late
		default:
			states[i] = Gone
		}
	}
	// A region that hears from fewer than half the regions (itself
	// included) is more likely the one cut off than they are gone: it
	// gives no silent region's claim to itself, however long the silence.
	if 2*fresh < n {
		for i, st := range states {
			if st == Gone && l.heard[i] >= 0 {
				states[i] = Late
			}
		}
	}
	// Each region's demand and usage of each bucket, summed over its
	// replicas' reports of the epoch, and the bucket's smallest limit.
	sums := make(map[uint64][]Record, len(buckets))
	limits := make(map[uint64]Bucket, len(buckets))
	for key, b := range buckets {
		sums[key] = make([]Record, n)
		limits[key] = b
	}
	for _, two := range l.reports {
		for _, r := range two {
			if r.Epoch != prev {
				continue
			}
			place := l.place(r.Region)
			for key, rec := range r.Buckets {
				s := sums[key]
				if s == nil {
					s = make([]Record, n)
					sums[key] = s
					limits[key] = rec.Bucket
				}
				s[place].Demand += want(rec.Demand)
				s[place].Usage += want(rec.Usage)
				b := limits[key]
				limits[key] = Bucket{Size: min(b.Size, want(rec.Size)), Rate: min(b.Rate, want(rec.Rate))}
			}
		}
	}
	// While a region is late, the buckets it last held claims of are
	// divided too, whether or not a fresh report names them: it holds
	// them still, and the others must leave it its part.
	late := slices.Contains(states, Late)
	if late {
		for key, h := range l.held {
			if _, ok := limits[key]; !ok && heldByLate(h, states) {
				sums[key] = make([]Record, n)
				limits[key] = h.limit
			}
		}
	}
	l.divided, l.states = epoch, states
	out := make(map[uint64]Claim, len(sums))
	views := make([]View, n)
	for key, b := range limits {
		h := l.held[key]
		for i := range views {
			sum := sums[key][i]
			views[i] = View{State: states[i], Demand: sum.Demand, Usage: sum.Usage}
			if states[i] == Fresh && h != nil {
				// What it admits until the claims take over: what it was
				// asked at the epoch's pace, as far as its last claim lets
				// it. Not counted, its admissions meanwhile would be given
				// to the others again.
				views[i].Pending = min(sum.Demand*l.lag, max(h.claims[i].Size-sum.Usage, 0))
			}
			if states[i] == Late {
				// What it last held; never worked out here (the bucket is
				// new here since), an equal part, as it counts ours.
				views[i].Held = Claim{Size: b.Size / float64(n), Share: 1 / float64(n)}
				if h != nil {
					views[i].Held = h.claims[i]
				}
			}
		}
		claims := make([]Claim, n)
		Divide(b.Size, b.Rate, views, claims)
		if late && h != nil {
			// While a region is late, no region's claim grows: a region
			// that hears it and one that does not may divide differently,
			// and only parts that shrink keep them within the limit.
			for i := range claims {
				if states[i] == Fresh {
					claims[i] = Claim{Size: min(claims[i].Size, h.claims[i].Size), Share: min(claims[i].Share, h.claims[i].Share)}
				}
			}
		}
		l.held[key] = &heldClaims{claims: claims, epoch: epoch, limit: b}
		out[key] = claims[l.self]
	}
	// Claims of buckets no longer used here for as long as a region may
	// be silent are forgotten.
	for key, h := range l.held {
		if epoch-h.epoch > l.silence {
			delete(l.held, key)
		}
	}
	return out
}

// Replicas is how many replicas of region reported an epoch from
// epoch-1 on (at least one): what each of them counts is its part of the
// region's bucket.
func (l *Ledger) Replicas(region string, epoch int64) int {
	n := 0
	for _, two := range l.reports {
		if two[0].Region == region && two[0].Epoch >= epoch-1 {
			n++
		}
	}
	return max(n, 1)
}

// heldByLate reports whether a late region holds a claim in h.
func heldByLate(h *heldClaims, states []State) bool {
	for i, st := range states {
		if st == Late && (h.claims[i].Size > 0 || h.claims[i].Share > 0) {
			return true
		}
	}
	return false
}

// Forget drops the reports of replicas silent for more than the silence,
// so that the ledger holds what live replicas published.
func (l *Ledger) Forget(epoch int64) {
	for key, two := range l.reports {
		if epoch-two[0].Epoch > l.silence {
			delete(l.reports, key)
		}
	}
}
