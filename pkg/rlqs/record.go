package rlqs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Record is what one replica publishes of one level for the others: its
// subscribers there as a few groups, and the latest activity among them.
// Its size is bounded whatever the number of subscribers (at most
// maxGroups groups), and so is the work of reading it.
type Record struct {
	Groups []Group
	// Active is the latest request a subscriber reported, Unix
	// microseconds; 0 for never.
	Active int64
	// Replica names the replica whose record it is, as a Board reads it
	// (not encoded: the board keeps records by replica).
	Replica string
}

// The groups of a record: up to exactGroups subscribers are each a group
// of one, so that small fleets divide exactly; beyond, subscribers whose
// demands are within a factor of 2^(1/groupSteps) of each other (9%) are
// one group, down to 2^-groupOctaves of the rate (lower demands are one
// group), and those not measured yet one more. A group counts its members
// at their mean demand, which never lets shares add up to more than the
// rate (Group), and costs fairness only in the group that holds the fill
// level, by at most its width.
const (
	exactGroups  = 64
	groupSteps   = 8
	groupOctaves = 24
	maxGroups    = groupSteps*(groupOctaves+1) + 2
)

// record returns this replica's record of the level, of its subscribers
// live at now (their idle floor applied, as a division now would count
// them), and how long it holds: until the last of them expires. An empty
// record (no one live) removes the replica's.
func (lv *levelState) record(now time.Time) (*Record, time.Duration) {
	at := now.UnixNano()
	until := at
	live := 0
	for _, h := range lv.subs.list {
		if at <= h.until {
			live++
		}
	}
	floor := lv.rate * idleShare / max(float64(live)+lv.othersCount, 1)
	demands := make([]float64, 0, live)
	r := &Record{}
	for _, h := range lv.subs.list {
		if at > h.until {
			continue
		}
		demands = append(demands, math.Max(want(h.demand), floor))
		r.Active = max(r.Active, h.active)
		until = max(until, h.until)
	}
	if len(demands) == 0 {
		return nil, 0
	}
	r.Groups = groupDemands(demands, lv.rate)
	return r, time.Duration(until - at)
}

// groupDemands groups demands (sorting them) as a record does.
func groupDemands(demands []float64, rate float64) []Group {
	slices.Sort(demands)
	gs := make([]Group, 0, min(len(demands), maxGroups))
	if len(demands) <= exactGroups {
		for _, d := range demands {
			gs = append(gs, Group{Count: 1, Sum: d})
		}
		return gs
	}
	last := math.MinInt
	for _, d := range demands {
		k := groupOf(d, rate)
		if k == last {
			g := &gs[len(gs)-1]
			g.Count++
			g.Sum += d
			continue
		}
		gs = append(gs, Group{Count: 1, Sum: d})
		last = k
	}
	return gs
}

// groupOf is the group a demand falls in: its log2 in groupSteps of an
// octave, relative to the rate, clamped; one past them for +Inf.
func groupOf(d, rate float64) int {
	const lowest, unbounded = -groupSteps * groupOctaves, groupSteps + 1
	switch {
	case math.IsInf(d, 1):
		return unbounded
	case !(d > 0) || !(rate > 0):
		return lowest
	}
	k := math.Floor(groupSteps * math.Log2(d/rate))
	return int(min(max(k, lowest), groupSteps)) // above 2× the rate: one group
}

// recordVersion starts an encoded record, so that a record of another
// form is never misread.
const recordVersion = 1

// appendRecord appends r encoded: the version, its activity (8 bytes),
// then per group its count (a uvarint) and its sum (a float64's 8 bytes,
// so that +Inf round-trips), big-endian.
func appendRecord(b []byte, r *Record) []byte {
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Active))
	for _, g := range r.Groups {
		b = binary.AppendUvarint(b, uint64(g.Count))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(g.Sum))
	}
	return b
}

// errRecord is an encoded record that cannot be read.
var errRecord = errors.New("not a record of this version")

// parseRecord reads an encoded record. Nothing in it is trusted: a
// record cut short, of another version, or of more than maxGroups groups
// is an error.
func parseRecord(s string) (Record, error) {
	if len(s) < 9 || s[0] != recordVersion {
		return Record{}, errRecord
	}
	r := Record{Active: int64(binary.BigEndian.Uint64([]byte(s[1:9])))}
	b := []byte(s[9:])
	for len(b) > 0 {
		if len(r.Groups) == maxGroups {
			return Record{}, fmt.Errorf("%w: more than %d groups", errRecord, maxGroups)
		}
		n, w := binary.Uvarint(b)
		if w <= 0 || len(b)-w < 8 || n > 1<<40 {
			return Record{}, fmt.Errorf("%w: group %d cut short", errRecord, len(r.Groups))
		}
		r.Groups = append(r.Groups, Group{Count: float64(n), Sum: math.Float64frombits(binary.BigEndian.Uint64(b[w:]))})
		b = b[w+8:]
	}
	return r, nil
}

// LevelSummary is a level as GET /buckets shows it: its division, and the
// largest shares of its subscribers on this replica.
type LevelSummary struct {
	Key         string  `json:"key"`
	Rate        float64 `json:"rate_per_second"`
	Subscribers int     `json:"subscribers"`
	Unknown     int     `json:"subscribers_not_measured_yet"`
	Replicas    int     `json:"replicas"`
	Demand      float64 `json:"demand_per_second"`
	// Fill is the fill level; absent (+Inf) when every demand fits.
	Fill *float64 `json:"fill_level_per_second,omitempty"`
	At   string   `json:"divided_at,omitempty"`
	// FailStatic says the level's exchanges with the other replicas fail:
	// its subscribers here divide what they held before, the rate less
	// OthersHeld.
	FailStatic bool     `json:"fail_static,omitempty"`
	OthersHeld *float64 `json:"other_replicas_held_per_second,omitempty"`
	Here       int      `json:"subscribers_here"`
	Largest    []Share  `json:"largest_shares_here"`
	Complete   bool     `json:"complete"`
}

// Share is one subscriber's share of a level.
type Share struct {
	Instance string   `json:"instance"`
	Demand   *float64 `json:"demand_per_second,omitempty"`
	Share    float64  `json:"share_per_second"`
}

// summary describes the level, with its top largest shares here (all
// when top < 0).
func (lv *levelState) summary(key string, top int) LevelSummary {
	d := lv.div
	s := LevelSummary{Key: key, Rate: lv.rate, Subscribers: d.Subscribers, Unknown: d.Unknown, Replicas: d.Replicas,
		Demand: d.Demand, Here: lv.subs.len(), Largest: []Share{}}
	if !math.IsInf(d.Fill, 1) {
		f := d.Fill
		s.Fill = &f
	}
	if !d.At.IsZero() {
		s.At = d.At.UTC().Format(time.RFC3339Nano)
	}
	if d.Frozen {
		held := d.Claim
		s.FailStatic, s.OthersHeld = true, &held
	}
	for _, h := range lv.subs.list {
		sh := Share{Instance: h.instance, Share: lv.shareOf(h)}
		if !math.IsInf(h.demand, 1) {
			dm := h.demand
			sh.Demand = &dm
		}
		s.Largest = append(s.Largest, sh)
	}
	slices.SortFunc(s.Largest, func(a, b Share) int {
		return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Instance, b.Instance))
	})
	if top >= 0 && len(s.Largest) > top {
		s.Largest = s.Largest[:top]
	}
	s.Complete = len(s.Largest) == lv.subs.len()
	return s
}
