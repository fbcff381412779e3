package region

import (
	"cmp"
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
	// Late names (by KeyHash) the regions its replica counted late at
	// its last division, for want of their reports or because its own
	// did not reach them: each of those counts the replica's region late
	// in turn, so that two regions that do not both hear each other both
	// hold to what they had.
	Late    []uint64
	Buckets map[uint64]Record
	// list holds the records instead of Buckets, in the order of their
	// keys, one a key: the reports an Exchange makes and reads, which
	// cost no map of 100,000 buckets each an interval (report.go).
	list []keyed
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
	// selfHash is Self's name's KeyHash; late the regions the last
	// division counted late first-hand (not heard, or not reached), what
	// Self's next report says (Report.Late).
	selfHash uint64
	late     []uint64
	// held are the claims last worked out for each bucket, with the
	// epoch they were worked out at, in the order of the buckets' keys;
	// next is the arrays the next division fills, then held's. A division
	// goes through its reports' lists and this replica's buckets, each in
	// that order, and held, side by side: no map of 100,000 buckets, and
	// nothing allocated a bucket.
	held, next heldClaims
	// divided is the epoch of the last claims worked out, and states
	// each region's state then (nil before the first): what the views
	// show.
	divided int64
	states  []State
	// reported is, by region place, what its replicas' reports of the
	// last division held: what the views show, worked out as it went
	// through them.
	reported []reported
	// spares are lists of reports let go, for the next to fill.
	spares [][]keyed
}

// heldClaims are the claims held of buckets, in the order of their keys:
// bucket i's key, its claims by region place (n from i*n), when they
// were worked out and the limit they were worked out for.
type heldClaims struct {
	keys   []uint64
	claims []Claim
	epoch  []int64
	limit  []Bucket
}

// of returns the claims held of key, by region place (n of them); nil if
// none.
func (h *heldClaims) of(key uint64, n int) []Claim {
	i, ok := slices.BinarySearch(h.keys, key)
	if !ok {
		return nil
	}
	return h.claims[i*n : (i+1)*n]
}

func (h *heldClaims) reset() {
	h.keys, h.claims, h.epoch, h.limit = h.keys[:0], h.claims[:0], h.epoch[:0], h.limit[:0]
}

// keyedBucket is a bucket's limit and its key hash.
type keyedBucket struct {
	key uint64
	Bucket
}

// NewLedger returns the ledger of a replica of region self, among
// regions (self's included; every replica must be given them in the
// same order), that counts a region silent for more than silence epochs
// gone, and works out claims lag after the reports they are made of.
func NewLedger(self string, regions []string, silence int64, lag time.Duration) *Ledger {
	l := &Ledger{self: -1, regions: regions, silence: max(silence, 1), lag: lag.Seconds(), reports: map[string]*[2]Report{},
		heard: make([]int64, len(regions)), undelivered: make([]int64, len(regions))}
	for i, r := range regions {
		if r == self {
			l.self = i
		}
		l.heard[i], l.undelivered[i] = -1, -1
	}
	l.selfHash = KeyHash(self)
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
		l.recycle(two[0], r)
		two[0] = r
	case r.Epoch > two[0].Epoch:
		l.recycle(two[1], r)
		two[1], two[0] = two[0], r
	case r.Epoch == two[1].Epoch:
		l.recycle(two[1], r)
		two[1] = r
	case r.Epoch > two[1].Epoch:
		l.recycle(two[1], r)
		two[1] = r
	default:
		l.recycle(r, Report{})
	}
	l.heard[place] = max(l.heard[place], r.Epoch)
}

// spareLists bounds the lists of reports let go that a ledger keeps for
// the next (spare).
const spareLists = 4

// recycle keeps the list of gone, a report the ledger lets go, for the
// next report to fill; unless taken, the report taken in its place, has
// the same.
func (l *Ledger) recycle(gone, taken Report) {
	if cap(gone.list) == 0 || len(l.spares) == spareLists {
		return
	}
	if cap(taken.list) > 0 && &gone.list[:1][0] == &taken.list[:1][0] {
		return
	}
	l.spares = append(l.spares, gone.list[:0])
}

// spare returns the room of a report's list the ledger let go, or nil.
func (l *Ledger) spare() []keyed {
	n := len(l.spares)
	if n == 0 {
		return nil
	}
	list := l.spares[n-1]
	l.spares[n-1] = nil
	l.spares = l.spares[:n-1]
	return list
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
	mine := make([]keyedBucket, 0, len(buckets))
	for key, b := range buckets {
		mine = append(mine, keyedBucket{key, b})
	}
	slices.SortFunc(mine, func(a, b keyedBucket) int { return cmp.Compare(a.key, b.key) })
	t := l.claims(epoch, mine)
	out := make(map[uint64]Claim, len(t.keys))
	for i, key := range t.keys {
		out[key] = t.claims[i]
	}
	return out
}

// cursor is where a division is in a report's list.
type cursor struct {
	list  []keyed
	place int
}

// claims is Claims of the buckets of mine, in the order of their keys
// (of a key there twice, the last counts), as a table.
func (l *Ledger) claims(epoch int64, mine []keyedBucket) *claimTable {
	prev := epoch - 1
	n := len(l.regions)
	states := l.statesAt(prev)
	// The replicas' reports of the epoch, each a list in the order of
	// its keys (a report taken with Buckets is put in order here).
	var curs []cursor
	size := len(mine)
	for _, two := range l.reports {
		for _, r := range two {
			if r.Epoch != prev {
				continue
			}
			list := r.list
			if list == nil {
				for key, rec := range r.Buckets {
					list = append(list, keyed{key, rec})
				}
				slices.SortFunc(list, func(a, b keyed) int { return cmp.Compare(a.key, b.key) })
			}
			curs = append(curs, cursor{list: list, place: l.place(r.Region)})
			size = max(size, len(list))
		}
	}
	late := slices.Contains(states, Late)
	l.divided, l.states = epoch, states
	out := &claimTable{keys: make([]uint64, 0, size), claims: make([]Claim, 0, size)}
	held, next := &l.held, &l.next
	next.reset()
	sums, views, claims := make([]Record, n), make([]View, n), make([]Claim, n)
	named, seen := make([]reported, n), make([]bool, n)
	for _, c := range curs {
		named[c.place].replicas++
	}
	l.reported = named // filled as the division goes through the reports
	hi := 0 // the next of held
	for {
		// The smallest key left in any of them.
		key, any := uint64(0), false
		least := func(k uint64) {
			if !any || k < key {
				key, any = k, true
			}
		}
		if len(mine) > 0 {
			least(mine[0].key)
		}
		if hi < len(held.keys) {
			least(held.keys[hi])
		}
		for _, c := range curs {
			if len(c.list) > 0 {
				least(c.list[0].key)
			}
		}
		if !any {
			break
		}
		// Each region's demand and usage of the bucket, summed over its
		// replicas' reports of the epoch, and its smallest limit.
		var b Bucket
		used := false
		for len(mine) > 0 && mine[0].key == key {
			b, used, mine = mine[0].Bucket, true, mine[1:]
		}
		clear(sums)
		clear(seen)
		for j := range curs {
			c := &curs[j]
			for len(c.list) > 0 && c.list[0].key == key {
				rec := c.list[0].Record
				c.list = c.list[1:]
				if !used {
					b, used = rec.Bucket, true
				}
				seen[c.place] = true
				sums[c.place].Demand += want(rec.Demand)
				sums[c.place].Usage += want(rec.Usage)
				b = Bucket{Size: min(b.Size, want(rec.Size)), Rate: min(b.Rate, want(rec.Rate))}
			}
		}
		for i, ok := range seen {
			if ok {
				named[i].buckets++
				named[i].demand += sums[i].Demand
			}
		}
		var h []Claim // what it held, if anything
		var heldEpoch int64
		if hi < len(held.keys) && held.keys[hi] == key {
			h, heldEpoch = held.claims[hi*n:(hi+1)*n], held.epoch[hi]
			if !used && late && heldByLate(h, states) {
				// While a region is late, the buckets it last held claims
				// of are divided too, whether or not a fresh report names
				// them: it holds them still, and the others must leave it
				// its part.
				b, used = held.limit[hi], true
			}
			if !used {
				// Not divided: held as it was, as long as a region may be
				// silent; then forgotten.
				if epoch-heldEpoch <= l.silence {
					next.keys = append(next.keys, key)
					next.claims = append(next.claims, h...)
					next.epoch = append(next.epoch, heldEpoch)
					next.limit = append(next.limit, held.limit[hi])
				}
				hi++
				continue
			}
			hi++
		}
		for i := range views {
			sum := sums[i]
			views[i] = View{State: states[i], Demand: sum.Demand, Usage: sum.Usage}
			if states[i] == Fresh && h != nil {
				// What it admits until the claims take over: what it was
				// asked at the epoch's pace, as far as its last claim lets
				// it. Not counted, its admissions meanwhile would be given
				// to the others again.
				views[i].Pending = min(sum.Demand*l.lag, max(h[i].Size-sum.Usage, 0))
			}
			if states[i] == Late {
				// What it last held; never worked out here (the bucket is
				// new here since), an equal part, as it counts ours.
				views[i].Held = Claim{Size: b.Size / float64(n), Share: 1 / float64(n)}
				if h != nil {
					views[i].Held = h[i]
				}
			}
		}
		Divide(b.Size, b.Rate, views, claims)
		if late && h != nil {
			// While a region is late, no region's claim grows: a region
			// that hears it and one that does not may divide differently,
			// and only parts that shrink keep them within the limit.
			for i := range claims {
				if states[i] == Fresh {
					claims[i] = Claim{Size: min(claims[i].Size, h[i].Size), Share: min(claims[i].Share, h[i].Share)}
				}
			}
		}
		next.keys = append(next.keys, key)
		next.claims = append(next.claims, claims...)
		next.epoch = append(next.epoch, epoch)
		next.limit = append(next.limit, b)
		out.keys = append(out.keys, key)
		out.claims = append(out.claims, claims[l.self])
	}
	l.held, l.next = l.next, l.held
	out.index()
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

// heldByLate reports whether a late region holds a claim in held, the
// claims of a bucket by region place.
func heldByLate(held []Claim, states []State) bool {
	for i, st := range states {
		if st == Late && (held[i].Size > 0 || held[i].Share > 0) {
			return true
		}
	}
	return false
}

// holds reports whether the ledger keeps reports of the replica of
// field ("region/replica").
func (l *Ledger) holds(field string) bool { return l.reports[field] != nil }

// Forget drops the reports of replicas silent for more than the silence,
// so that the ledger holds what live replicas published.
func (l *Ledger) Forget(epoch int64) {
	for key, two := range l.reports {
		if epoch-two[0].Epoch > l.silence {
			delete(l.reports, key)
			l.recycle(two[0], Report{})
			l.recycle(two[1], Report{})
		}
	}
}
