package region

import "github.com/envoy-rls/envoy-rls/pkg/limit"

// What the admin endpoints and the operator's page show of the regions.
// The JSON of these types is part of GET /buckets, POST /explain and GET
// /ui/status: keep it stable.

// String names a state as the views show it.
func (s State) String() string {
	switch s {
	case Fresh:
		return "fresh"
	case Late:
		return "late"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// Status is one region as this replica sees it: its state at the last
// division, this replica's exchanges with its store, and what its
// replicas reported of the last interval divided.
type Status struct {
	Region string `json:"region"`
	// Own says it is this replica's region.
	Own bool `json:"own,omitempty"`
	// State is "fresh" (its reports of the interval arrived), "late"
	// (they did not: it keeps the claims it last held) or "gone" (silent
	// past -region-silence: its claims given back), as of the last
	// division ("late" before the first, for the others).
	State string `json:"state"`
	// LastExchangeSeconds is the time since this replica last exchanged
	// its report with the region's store; -1 before the first.
	LastExchangeSeconds float64 `json:"last_exchange_seconds"`
	// FailedExchanges counts this replica's exchanges with the region's
	// store that failed.
	FailedExchanges int64 `json:"failed_exchanges"`
	// Replicas, Buckets and Demand are what its reports of the last
	// interval divided hold: how many replicas reported, how many
	// buckets they named, and the hits a second they were asked of them.
	Replicas int     `json:"replicas"`
	Buckets  int     `json:"buckets"`
	Demand   float64 `json:"demand_per_second"`
}

// BucketView is one bucket as the regions divide it: the claim this
// region decides it under, and each region's part.
type BucketView struct {
	// Region is this replica's region; Size and Rate its claim of the
	// bucket (hits, and hits a second), Share its part of the rate.
	Region string  `json:"region"`
	Size   float64 `json:"size"`
	Rate   float64 `json:"rate"`
	Share  float64 `json:"share"`
	// Divided says an exchange has divided the bucket; until one has,
	// each region holds an equal part and Parts is empty.
	Divided bool   `json:"divided"`
	Parts   []Part `json:"parts,omitempty"`
}

// Part is one region's part of a bucket at the last division: its state,
// the demand and usage its replicas reported, and the claim it was given.
type Part struct {
	Region string  `json:"region"`
	State  string  `json:"state"`
	Demand float64 `json:"demand_per_second"`
	Usage  float64 `json:"usage"`
	Size   float64 `json:"size"`
	Rate   float64 `json:"rate"`
}

// Statuses returns every region as this replica sees it, in name order.
func (x *Exchange) Statuses() []Status {
	now := x.opts.Clock()
	out := func() []Status {
		x.lmu.Lock()
		defer x.lmu.Unlock()
		return x.ledger.statuses()
	}()
	for i := range out {
		out[i].Own = out[i].Region == x.opts.Region
		out[i].LastExchangeSeconds = -1
		if at := x.LastExchange(out[i].Region); !at.IsZero() {
			out[i].LastExchangeSeconds = max(now.Sub(at).Seconds(), 0)
		}
		if f := x.failed[out[i].Region]; f != nil {
			out[i].FailedExchanges = f.Load()
		}
	}
	return out
}

// Bucket returns the bucket of key and limit l as the regions divide it.
func (x *Exchange) Bucket(key string, l limit.Limit) BucketView {
	hash := KeyHash(key)
	rate := l.PerSecond()
	// The claims and the parts of one division: Divide puts claims in
	// force under lmu.
	x.lmu.Lock()
	defer x.lmu.Unlock()
	c, divided := x.claims.Load().lookup(hash)
	if !divided {
		n := float64(len(x.ledger.regions))
		c = Claim{Size: float64(l.Size) / n, Share: 1 / n}
	}
	v := BucketView{Region: x.opts.Region, Size: c.Size, Share: c.Share, Rate: c.Share * rate, Divided: divided}
	if divided {
		v.Parts = x.ledger.parts(hash, rate)
	}
	return v
}

// reported is what a region's replicas reported of the interval last
// divided: how many reported, the buckets they named and the hits a
// second they were asked of them.
type reported struct {
	replicas, buckets int
	demand            float64
}

// statuses is every region's state at the last division and what its
// replicas reported of the interval divided.
func (l *Ledger) statuses() []Status {
	out := make([]Status, len(l.regions))
	for i, r := range l.regions {
		out[i] = Status{Region: r, State: l.stateOf(i).String()}
		if i < len(l.reported) {
			out[i].Replicas, out[i].Buckets, out[i].Demand = l.reported[i].replicas, l.reported[i].buckets, l.reported[i].demand
		}
	}
	return out
}

// parts is each region's part of the bucket of key at the last division
// (rate: the limit's, a second).
func (l *Ledger) parts(key uint64, rate float64) []Part {
	out := make([]Part, len(l.regions))
	h := l.held.of(key, len(l.regions))
	for i, r := range l.regions {
		out[i] = Part{Region: r, State: l.stateOf(i).String()}
		if h != nil {
			out[i].Size, out[i].Rate = h[i].Size, h[i].Share*rate
		}
	}
	for _, two := range l.reports {
		for _, r := range two {
			if rec, ok := r.lookup(key); ok && r.Epoch == l.divided-1 {
				i := l.place(r.Region)
				if i < 0 {
					continue
				}
				out[i].Demand += want(rec.Demand)
				out[i].Usage += want(rec.Usage)
			}
		}
	}
	return out
}

// stateOf is region i's state at the last division: before the first,
// this region's is fresh and the others' late.
func (l *Ledger) stateOf(i int) State {
	if l.states == nil {
		if i == l.self {
			return Fresh
		}
		return Late
	}
	return l.states[i]
}
