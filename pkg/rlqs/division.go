package rlqs

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// levelState is one level as a replica divides it: its subscribers here,
// the other replicas' records, and the last division.
type levelState struct {
	owner *MemoryRegistry // the registry that holds it
	level string          // its key there
	rate  float64
	subs  holders // this replica's subscribers

	// peers are the other replicas' records, as the last exchange read
	// them, and those held over a store fault (peerRecord.until).
	peers       []peerRecord
	others      []Group // the peers' subscribers, as their records group them
	othersCount float64
	othersN     int   // their records
	othersAct   int64 // the latest activity they report

	// frozen is set while the level's exchanges fail: the peers' records
	// are as of the last that did not, and the peers cannot read this
	// replica's demands either. Its subscribers here then divide what
	// they held at the last division before: the rate less the part the
	// peers held (claim, a fraction of the rate, their share of what no
	// one used included), so that replicas that all lose the store still
	// give out no more than the rate together, whatever the rate becomes
	// meanwhile. A level never divided with fresh records (claimed unset)
	// has nothing to hold: frozen, it divides nothing.
	frozen  bool
	claim   float64
	claimed bool
	// budget is what the last division divided among sorted: the rate,
	// or its part here while frozen.
	budget float64

	div    Division
	floor  float64 // the demand an idle subscriber counts as, at the last division
	latest int64   // the latest activity of any subscriber
	dirty  bool    // something changed since the last division
	// expires is when the first subscriber counted expires, Unix
	// nanoseconds: the division is stale past it too.
	expires int64
	// sorted are the demands the last division counted, in order, with
	// running sums (sums[k], counts[k]: of those before k), so that a
	// subscriber new since is counted at once without sorting again;
	// joined counts those.
	sorted []point
	sums   []float64
	counts []float64
	joined int
}

// held is one subscriber of a level here.
type held struct {
	instance string
	demand   float64
	active   int64 // Unix microseconds
	until    int64 // Unix nanoseconds
	// counted is the demand the last division counted it at (its idle
	// floor applied); +Inf if it came since, counted as wanting all.
	counted float64
	// gone is set once it has left the level (expired, withdrawn).
	gone bool
}

// point is a demand of count subscribers alike, as a division sorts them.
type point struct{ demand, count float64 }

// peerRecord is another replica's record of the level. until is zero for one
// the last exchange read; for one it did not, read before a store fault,
// the time it is held until (Unix nanoseconds): a peer whose record ran
// out on the store while no one could write there has not left, and
// writes it again within its entries' TTL once it can.
type peerRecord struct {
	Record
	until int64
}

// Division is a level's limit divided among its subscribers on every
// replica, as last worked out here.
type Division struct {
	// Rate is the level's limit, requests per second.
	Rate float64
	// Fill is the fill level: each subscriber's share is its demand, up
	// to Fill; +Inf when the demands together fit in Rate.
	Fill float64
	// Subscribers counts them on every replica; Unknown those not
	// measured yet (a first report), which take shares of Fill.
	Subscribers, Unknown int
	// Demand is the measured subscribers' demands together, per second.
	Demand float64
	// Replicas is how many replicas have subscribers there, this one
	// included.
	Replicas int
	// At is when it was worked out.
	At time.Time
	// Frozen says the level's exchanges were failing: the subscribers
	// here divided what they held before (Rate less Claim).
	Frozen bool
	// Claim is the part of Rate the other replicas held at the last
	// division with their records fresh.
	Claim float64
}

func newLevelState(owner *MemoryRegistry, level string) *levelState {
	return &levelState{owner: owner, level: level, expires: math.MaxInt64}
}

// stale reports whether the division needs working out anew at now:
// something changed, or a subscriber it counts has expired.
func (lv *levelState) stale(now time.Time) bool {
	return lv.dirty || now.UnixNano() > lv.expires
}

// put records a subscriber's entry, valid until (Unix nanoseconds), and
// reports whether it is new here.
func (lv *levelState) put(e *Entry, until int64) (joined bool) {
	if lv.rate != e.Rate {
		lv.rate, lv.dirty = e.Rate, true
	}
	h := e.h // a hint record checked
	if h == nil {
		h = lv.subs.get(e.Instance)
	}
	if h == nil {
		h = &held{instance: e.Instance, counted: unknown}
		lv.subs.add(h)
		lv.join()
		joined = true
	}
	e.h = h
	if h.demand != e.Demand {
		lv.dirty = true
	}
	h.demand, h.active, h.until = e.Demand, e.Active, until
	lv.latest = max(lv.latest, e.Active)
	lv.expires = min(lv.expires, until)
	return joined
}

// join counts a subscriber new since the last division, as wanting all
// it can get: the fill level falls at once, so that shares still never
// add up to more than the rate. A binary search of the last division's
// demands, not a new division.
func (lv *levelState) join() {
	lv.joined++
	lv.dirty = true
	if !lv.div.At.IsZero() {
		lv.div.Fill = fillSorted(lv.budget, lv.sorted, lv.sums, lv.counts, float64(lv.joined))
		lv.div.Subscribers++
		lv.div.Unknown++
	}
}

// divide works the division out anew at now: subscribers past their TTL
// go, each one's demand is raised to the idle floor, and the fill level
// is found over them and the other replicas' groups.
func (lv *levelState) divide(now time.Time) {
	at := now.UnixNano()
	latest := lv.othersAct
	lv.expires = math.MaxInt64
	lv.subs.keep(func(h *held) bool {
		if at > h.until {
			return false
		}
		latest = max(latest, h.active)
		lv.expires = min(lv.expires, h.until)
		return true
	})
	n := float64(lv.subs.len()) + lv.othersCount
	lv.floor = lv.rate * idleShare / max(n, 1)
	pts := lv.sorted[:0]
	d := Division{Rate: lv.rate, Subscribers: int(n), Replicas: lv.othersN + 1, At: now, Frozen: lv.frozen}
	for _, h := range lv.subs.list {
		h.counted = math.Max(want(h.demand), lv.floor)
		pts = append(pts, point{h.counted, 1})
		d.add(h.demand, 1)
	}
	for _, g := range lv.others {
		d.add(g.Sum, g.Count)
		if !lv.frozen {
			pts = append(pts, point{g.demand(), g.Count})
		}
	}
	lv.budget = lv.rate
	switch {
	case lv.frozen && lv.claimed:
		lv.budget = lv.rate * max(1-lv.claim, 0)
	case lv.frozen:
		lv.budget = 0
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.demand, b.demand) })
	lv.sorted, lv.sums, lv.counts = pts, runningSums(lv.sums[:0], pts, false), runningSums(lv.counts[:0], pts, true)
	d.Fill = fillSorted(lv.budget, lv.sorted, lv.sums, lv.counts, 0)
	if !lv.frozen {
		lv.claim, lv.claimed = lv.claimOf(d.Fill, n), true
	}
	d.Claim = lv.claim * lv.rate
	lv.div, lv.latest, lv.joined, lv.dirty = d, latest, 0, false
}

// claimOf is the part of the rate the peers hold in a division of fill
// level fill among n subscribers, as a fraction of the rate: their
// shares, and of what the shares leave, their part by count. What a
// replica holds while its exchanges fail is the rest (frozen), so the
// parts still add up to the rate.
func (lv *levelState) claimOf(fill, n float64) float64 {
	if n <= 0 || !(lv.rate > 0) {
		return 0
	}
	theirs := 0.0
	for _, g := range lv.others {
		theirs += math.Min(g.demand(), fill) * g.Count
	}
	used := theirs
	for _, h := range lv.subs.list {
		used += math.Min(h.counted, fill)
	}
	return min((theirs+max(lv.rate-used, 0)*lv.othersCount/n)/lv.rate, 1)
}

// add counts a demand of count subscribers in the division's figures.
func (d *Division) add(demand, count float64) {
	if math.IsInf(demand, 1) {
		d.Unknown += int(count)
		return
	}
	d.Demand += want(demand)
}

// runningSums returns, for each point k and one past the last, the sum of
// the points before k: of their counts, or of their demands × counts.
func runningSums(dst []float64, pts []point, counts bool) []float64 {
	s := 0.0
	dst = append(dst, 0)
	for _, p := range pts {
		if counts {
			s += p.count
		} else {
			s += want(p.demand) * p.count
		}
		dst = append(dst, s)
	}
	return dst
}

// fillSorted is the fill level of rate divided among sorted points and
// extra subscribers wanting all they can get (FillGroups' level), by a
// binary search: once a point's demand reaches an equal part of what
// the points before it leave, every later one's does too.
func fillSorted(rate float64, pts []point, sums, counts []float64, extra float64) float64 {
	if !(rate > 0) {
		return 0
	}
	total := counts[len(pts)] + extra
	if total <= 0 {
		return math.Inf(1)
	}
	equal := func(k int) float64 { return (rate - sums[k]) / (total - counts[k]) }
	lo, hi := 0, len(pts)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if want(pts[mid].demand) >= equal(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == len(pts) && extra == 0 {
		return math.Inf(1) // every demand fits
	}
	return math.Max(equal(lo), 0)
}

// shareOf is a subscriber's share: its demand (at least the idle floor),
// no more than the last division counted it at, nor the fill level; 0
// once it has expired (a division dropped it).
func (lv *levelState) shareOf(h *held) float64 {
	if h == nil || h.gone {
		return 0
	}
	return math.Min(math.Min(math.Max(want(h.demand), lv.floor), h.counted), lv.div.Fill)
}

// setOthers keeps the other replicas' records, as an exchange at now read
// them. After exchanges that failed (frozen), a peer whose record was not
// read is held for hold from now: its record may only have run out on
// the store while no one could write there, and it writes it again
// within its entries' TTL of the store's return. Held any less, the
// replica that exchanges first after a store fault would count its peers
// gone and hand its own streams their part too.
func (lv *levelState) setOthers(recs []Record, now time.Time, hold time.Duration) {
	at := now.UnixNano()
	var keep []peerRecord
	if lv.frozen || lv.holding() {
		for _, p := range lv.peers {
			if p.Replica == "" || slices.ContainsFunc(recs, func(r Record) bool { return r.Replica == p.Replica }) {
				continue
			}
			if p.until == 0 && lv.frozen {
				p.until = at + hold.Nanoseconds()
			}
			if p.until > at {
				keep = append(keep, p)
			}
		}
	}
	lv.peers = lv.peers[:0]
	for _, r := range recs {
		lv.peers = append(lv.peers, peerRecord{Record: r})
	}
	lv.peers = append(lv.peers, keep...)
	lv.others, lv.othersCount, lv.othersN, lv.othersAct = lv.others[:0], 0, len(lv.peers), 0
	for _, p := range lv.peers {
		for _, g := range p.Groups {
			if !(g.Count > 0) {
				continue
			}
			lv.others = append(lv.others, g)
			lv.othersCount += g.Count
		}
		lv.othersAct = max(lv.othersAct, p.Active)
	}
	lv.latest = max(lv.latest, lv.othersAct)
	lv.frozen, lv.dirty = false, true
}

// holding reports whether a peer's record is held over a store fault.
func (lv *levelState) holding() bool {
	return slices.ContainsFunc(lv.peers, func(p peerRecord) bool { return p.until != 0 })
}

// freeze marks the level's exchanges failing: until one answers again,
// the subscribers here divide what they held (Division.Frozen).
func (lv *levelState) freeze() {
	if !lv.frozen {
		lv.frozen, lv.dirty = true, true
	}
}

// holders are a level's subscribers here: a short list, indexed by a map
// only once it is long (most levels have a few subscribers on a replica,
// and a map of one costs more than the list).
type holders struct {
	list  []*held
	index map[string]int // instance to position, once the list is long
}

// indexFrom is the length from which holders keep an index.
const indexFrom = 8

func (hs *holders) len() int { return len(hs.list) }

// get returns the subscriber of instance, or nil.
func (hs *holders) get(instance string) *held {
	if hs.index != nil {
		if i, ok := hs.index[instance]; ok {
			return hs.list[i]
		}
		return nil
	}
	for _, h := range hs.list {
		if h.instance == instance {
			return h
		}
	}
	return nil
}

// add adds h, whose instance is not there.
func (hs *holders) add(h *held) {
	hs.list = append(hs.list, h)
	switch {
	case hs.index != nil:
		hs.index[h.instance] = len(hs.list) - 1
	case len(hs.list) > indexFrom:
		hs.reindex()
	}
}

// remove removes the subscriber of instance, if there, marking it gone:
// the last takes its place.
func (hs *holders) remove(instance string) bool {
	i := -1
	if hs.index != nil {
		if j, ok := hs.index[instance]; ok {
			i = j
		}
	} else {
		i = slices.IndexFunc(hs.list, func(h *held) bool { return h.instance == instance })
	}
	if i < 0 {
		return false
	}
	hs.list[i].gone = true
	last := len(hs.list) - 1
	hs.list[i] = hs.list[last]
	hs.list[last] = nil
	hs.list = hs.list[:last]
	if hs.index != nil {
		delete(hs.index, instance)
		if i < last {
			hs.index[hs.list[i].instance] = i
		}
		if len(hs.list) <= indexFrom {
			hs.index = nil
		}
	}
	return true
}

// keep keeps the subscribers for which f is true, and marks the others
// gone.
func (hs *holders) keep(f func(h *held) bool) {
	n := 0
	for _, h := range hs.list {
		if f(h) {
			hs.list[n] = h
			n++
		} else {
			h.gone = true
		}
	}
	if n == len(hs.list) {
		return
	}
	clear(hs.list[n:])
	hs.list = hs.list[:n]
	hs.reindex()
}

func (hs *holders) reindex() {
	if len(hs.list) <= indexFrom {
		hs.index = nil
		return
	}
	hs.index = make(map[string]int, len(hs.list))
	for i, h := range hs.list {
		hs.index[h.instance] = i
	}
}
