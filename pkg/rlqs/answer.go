package rlqs

import (
	"context"
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// idleShare is the part of an equal share a subscriber that reports no
// request still gets: enough to let its next requests through until its
// next report raises it, little enough to leave the rest to the busy.
const idleShare = 1.0 / 20

// level is one level's division at a report: its limit's rate and size,
// and the stream's part of it.
type level struct {
	rate float64 // requests per second
	size int64   // what the limit admits at once: the bursts' budget
	mine float64 // the stream's share, all its buckets there together
}

// answer charges the report's usage, divides the limits of its buckets
// anew and returns each bucket's assignment.
func (st *stream) answer(ctx context.Context, batch []*sub, now time.Time) *rlqsv3.RateLimitQuotaResponse {
	svc := st.svc
	ctx, cancel := context.WithTimeout(ctx, st.budget())
	defer cancel()
	levels, ok := st.chargeAndRoom(ctx, batch, now)
	var view map[string][]Entry
	if ok {
		var err error
		view, err = svc.opts.Registry.Publish(ctx, now, st.entryTTL(), st.entries(levels, now))
		ok = err == nil
		if err != nil {
			svc.log.Warn("rlqs: the registry failed; the failure mode answers", "err", err)
		}
	}
	if !ok {
		svc.obs.Failed()
		switch svc.opts.FailureMode {
		case FailQuiet:
			return &rlqsv3.RateLimitQuotaResponse{}
		case FailAllow, FailDeny:
			return st.blanket(batch)
		}
		local, _ := svc.opts.LocalRegistry.Publish(ctx, now, st.entryTTL(), st.entries(levels, now))
		view = local
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.divide(levels, view)
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, b := range batch {
		if st.subs[b.key] != b {
			continue // abandoned meanwhile
		}
		if st.abandoned(b, view, now) {
			resp.BucketAction = append(resp.BucketAction, abandonAction(b.id))
			svc.obs.Assigned("abandon", true)
			continue
		}
		a := st.assign(b, levels, now)
		changed := !a.SameBucket(b.sent) || b.sentAt.IsZero()
		if changed {
			b.sentAt = now
		}
		b.sent = a
		svc.obs.Assigned(a.Kind.String(), changed)
		resp.BucketAction = append(resp.BucketAction, assignmentAction(b.id, a))
	}
	return resp
}

// chargeAndRoom charges, in one store call, what the stream's Envoy
// allowed on every level of the report's buckets (and what a failed call
// left owed): usage, which RLS calls on the same buckets then see. It
// reports false if the store failed: the charges are owed again, for the
// next report. The levels' rates and sizes come back.
func (st *stream) chargeAndRoom(ctx context.Context, batch []*sub, now time.Time) (map[string]*level, bool) {
	st.mu.Lock()
	levels := map[string]*level{}
	var calls []limit.Bucket
	for _, b := range batch {
		for _, l := range b.levels {
			if _, ok := levels[l.Key]; ok {
				continue
			}
			levels[l.Key] = &level{rate: l.Rule.Limit.PerSecond(), size: l.Rule.Limit.Size}
			if c, owed := st.owed[l.Key]; owed {
				delete(st.owed, l.Key)
				calls = append(calls, c)
			}
		}
	}
	for k, c := range st.owed { // levels of buckets not in this report
		calls = append(calls, c)
		delete(st.owed, k)
	}
	st.mu.Unlock()
	if len(calls) == 0 {
		return levels, true
	}
	if err := st.svc.opts.Store.Apply(ctx, now, calls, make([]limit.Result, len(calls))); err != nil {
		st.svc.log.Warn("rlqs: charging reported usage failed; it is charged with the next report", "err", err)
		st.mu.Lock()
		for _, c := range calls {
			if c.Hits > 0 {
				o := st.owed[c.Key]
				c.Hits = min(c.Hits+o.Hits, maxReported)
				st.owed[c.Key] = c
			}
		}
		st.mu.Unlock()
		return levels, false
	}
	return levels, true
}

// entries are what the stream publishes for levels: on each, its demand
// (every bucket of it there, capped by their shares below) and when it
// last saw a request; and this replica's RLS calls there.
func (st *stream) entries(levels map[string]*level, now time.Time) []Entry {
	st.mu.Lock()
	defer st.mu.Unlock()
	demand := make(map[string]float64, len(levels))
	active := make(map[string]int64, len(levels))
	for _, b := range st.subs {
		for i, l := range b.levels {
			if _, ok := levels[l.Key]; !ok {
				continue
			}
			demand[l.Key] += b.cappedDemand(i)
			active[l.Key] = max(active[l.Key], b.active.UnixMicro())
		}
	}
	out := make([]Entry, 0, 2*len(levels))
	for key := range levels {
		out = append(out, Entry{Level: key, Instance: st.instance, Demand: demand[key], Active: active[key]})
		if u := st.svc.opts.Usage; u != nil {
			if rate, last := u.rate(key, now); rate > 0 || !last.IsZero() {
				out = append(out, Entry{Level: key, Instance: "rls@" + st.svc.replica, Demand: rate, Active: last.UnixMicro()})
			}
		}
	}
	return out
}

// divide divides each level among its subscribers, on every replica, and
// the stream's part among its buckets there. Called with st.mu held.
func (st *stream) divide(levels map[string]*level, view map[string][]Entry) {
	var demands []float64
	for key, lv := range levels {
		es := view[key]
		floor := lv.rate * idleShare / float64(max(len(es), 1))
		demands = demands[:0]
		own := -1
		for i, e := range es {
			demands = append(demands, math.Max(e.Demand, floor))
			if e.Instance == st.instance {
				own = i
			}
		}
		lv.mine = 0
		if own >= 0 {
			mine := demands[own]
			lv.mine = math.Min(mine, FillLevel(lv.rate, demands))
		}
	}
	// The stream's part of each level, among its buckets there.
	type part struct {
		b *sub
		i int // the level's index in b.levels
	}
	parts := map[string][]part{}
	for _, b := range st.subs {
		for i, l := range b.levels {
			if _, ok := levels[l.Key]; ok {
				parts[l.Key] = append(parts[l.Key], part{b, i})
			}
		}
	}
	for key, ps := range parts {
		mine := levels[key].mine
		demands := make([]float64, len(ps))
		for j, p := range ps {
			demands[j] = p.b.cappedDemand(p.i)
		}
		shares := make([]float64, len(ps))
		Divide(mine, demands, shares)
		left := mine
		for _, s := range shares {
			left -= s
		}
		for j, p := range ps {
			// What the demands leave (their floor raised the stream's part)
			// goes to the buckets evenly.
			p.b.share[p.i] = shares[j] + math.Max(left, 0)/float64(len(ps))
		}
	}
}

// assign returns b's assignment: a token bucket of its smallest share
// over the levels that limit it, its burst the same part of their sizes
// (so that bursts add up to no more than a limit's size); a blanket rule
// when none does. Called with st.mu held.
func (st *stream) assign(b *sub, levels map[string]*level, now time.Time) Assignment {
	ttl := st.ttl()
	limited := false
	share, burst, slowest := math.Inf(1), int64(math.MaxInt64), math.Inf(1)
	for i, l := range b.levels {
		lv := levels[l.Key]
		if l.Rule.Shadow || lv == nil {
			continue
		}
		limited = true
		share = math.Min(share, b.share[i])
		slowest = math.Min(slowest, lv.rate)
		parts := make([]int64, 1)
		Split(lv.size, lv.rate, b.share[i:i+1], parts)
		burst = min(burst, parts[0])
	}
	switch {
	case b.unlimited || (!limited && len(b.levels) > 0):
		return Assignment{Kind: AllowAll, TTL: ttl}
	case !limited:
		return Assignment{Kind: st.svc.opts.Unmatched, TTL: ttl}
	}
	fill := FillInterval(slowest)
	prev := b.sent
	a := Next(prev, share, burst, fill)
	a.TTL = ttl
	return a
}

// abandoned reports whether no Envoy has reported a request of b for
// AbandonAfter (on this replica, or any, as the registry tells), and
// drops it from the stream if so. Called with st.mu held.
func (st *stream) abandoned(b *sub, view map[string][]Entry, now time.Time) bool {
	last := b.active
	if n := len(b.levels); n > 0 {
		for _, e := range view[b.levels[n-1].Key] {
			if t := time.UnixMicro(e.Active); e.Active > 0 && t.After(last) {
				last = t
			}
		}
	}
	if now.Sub(last) < st.svc.opts.AbandonAfter {
		return false
	}
	delete(st.subs, b.key)
	st.svc.buckets.Add(-1)
	st.unwatch(b)
	return true
}

// blanket answers every bucket of batch by the failure mode, for a short
// while: a report interval.
func (st *stream) blanket(batch []*sub) *rlqsv3.RateLimitQuotaResponse {
	kind := AllowAll
	if st.svc.opts.FailureMode == FailDeny {
		kind = DenyAll
	}
	ttl := int64(max(math.Ceil(st.interval.Seconds()), 5))
	resp := &rlqsv3.RateLimitQuotaResponse{}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range batch {
		a := Assignment{Kind: kind, TTL: ttl}
		b.sent, b.sentAt = a, time.Time{}
		st.svc.obs.Assigned(kind.String(), true)
		resp.BucketAction = append(resp.BucketAction, assignmentAction(b.id, a))
	}
	return resp
}

// budget is how long an answer's store and registry calls may take: the
// store timeout, which is sized for an RLS call, or for a report half its
// interval if longer (up to 5 s). An Envoy waits for nothing meanwhile: it
// enforces the assignment it holds until the answer comes, and an answer
// given up on sends it nothing while its report's work is done again at
// the next, which turns a slow store into a busier one.
func (st *stream) budget() time.Duration {
	return max(st.svc.opts.StoreTimeout, min(st.interval/2, 5*time.Second))
}

// entryTTL is how long the stream's registry entries last unless
// published again: its assignments' TTL (three report intervals), so that
// an Envoy that went away frees its share within a few report intervals.
func (st *stream) entryTTL() time.Duration { return time.Duration(st.ttl()) * time.Second }

func assignmentAction(id *rlqsv3.BucketId, a Assignment) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	strategy := &typev3.RateLimitStrategy{}
	switch a.Kind {
	case AllowAll:
		strategy.Strategy = &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}
	case DenyAll:
		strategy.Strategy = &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}
	default:
		strategy.Strategy = &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: a.MaxTokens, TokensPerFill: wrapperspb.UInt32(a.TokensPerFill),
			FillInterval: durationpb.New(time.Duration(a.FillInterval) * time.Second)}}
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(time.Duration(a.TTL) * time.Second), RateLimitStrategy: strategy}}}
}

func abandonAction(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
}
