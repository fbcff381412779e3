package rls

import (
	"context"
	"slices"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// Buckets are the buckets some descriptors reach, and their state: the
// answer of GET /buckets. Its JSON is stable, as Explanation's.
type Buckets struct {
	Domain string `json:"domain"`
	// At is the instant the buckets were read at (the store's clock).
	At          string              `json:"at"`
	Descriptors []DescriptorBuckets `json:"descriptors"`
	// Regions is every region a limit is divided among, as this replica
	// sees it; absent without regions.
	Regions []region.Status `json:"regions,omitempty"`
}

// DescriptorBuckets are the buckets of one descriptor: one per level of
// its walk that has a limit, from the top.
type DescriptorBuckets struct {
	Entries []Entry `json:"entries"`
	// Unlimited says a node on the walk allow-lists the descriptor: it
	// reaches no bucket.
	Unlimited bool           `json:"unlimited,omitempty"`
	Buckets   []BucketStatus `json:"buckets"`
}

// BucketStatus is one bucket and its state.
type BucketStatus struct {
	Key   string `json:"key"`
	Path  string `json:"path"`
	Label string `json:"label"`
	// Limit is the bucket's limit, as GET /config shows it.
	Limit descriptors.LimitDescription `json:"limit"`
	// Remaining is the room the bucket has now; Clear the time until it
	// is empty. AdmitsOne says whether one more hit fits, and Reset, when
	// it does not, the time until it does.
	Remaining int64  `json:"remaining"`
	Clear     string `json:"clear"`
	AdmitsOne bool   `json:"admits_one"`
	Reset     string `json:"reset,omitempty"`
	// Debt is how far past its limit the bucket counts (charges of a
	// limit that charges always, recorded past it), and BackWithin the
	// time until it is back within; both absent when it is within.
	Debt       int64  `json:"debt,omitempty"`
	BackWithin string `json:"back_within,omitempty"`
	// Period is a calendar window's period that the bucket counts now.
	Period *Period `json:"period,omitempty"`
	// Regions is the bucket as the regions divide it: this region's
	// claim, which Remaining and the rest are of, and each region's
	// part; absent without regions and for a limit of scope: region.
	Regions *region.BucketView `json:"regions,omitempty"`
}

// Period is the calendar period a calendar window counts in: its start
// and end (excluded), in RFC 3339 in its time zone, and the zone.
type Period struct {
	Start    string `json:"start"`
	End      string `json:"end"`
	TimeZone string `json:"time_zone"`
}

// periodOf returns the period a bucket of limit l in state st counts in
// at now, or nil if l is not a calendar window.
func periodOf(l limit.Limit, st limit.State, now time.Time) *Period {
	if !l.IsCalendar() {
		return nil
	}
	p, zone := l.CountedPeriod(st, now), window.Zone(l.Zone)
	return &Period{Start: time.UnixMicro(p.Start).In(zone).Format(time.RFC3339), End: time.UnixMicro(p.End).In(zone).Format(time.RFC3339),
		TimeZone: l.ZoneName()}
}

// debt is how far past its limit a bucket counts, and for how long.
type debt struct {
	hits       int64
	backWithin time.Duration
}

// debtOf reads the debt of a bucket in state st at now, whose peek (a
// decision of 0 hits) is peek: its reset is when it is back within.
func debtOf(st limit.State, l limit.Limit, at time.Time, peek limit.Result) debt {
	if over := limit.Count(st, l, at) - l.Size; over > 0 {
		return debt{hits: over, backWithin: peek.Reset}
	}
	return debt{}
}

// Reset is the answer of DELETE /buckets: the keys of the buckets reset.
type Reset struct {
	Domain string   `json:"domain"`
	Keys   []string `json:"reset"`
}

// reached resolves descriptors (each a list of entries) of a domain, as a
// request of them would be checked, and returns the domain, each
// descriptor's levels, and the distinct buckets of them all.
func (s *Service) reached(domain string, descs [][]descriptors.Entry) (*descriptors.Domain, [][]descriptors.Level, []limit.Bucket, error) {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, es := range descs {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range es {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	var cfg *descriptors.Config
	if g := s.config.Load(); g != nil {
		cfg = g.config
	}
	d, err := explainable(cfg, s.caps, req)
	if err != nil {
		return nil, nil, nil, err
	}
	levels := make([][]descriptors.Level, len(descs))
	var buckets []limit.Bucket
	seen := map[string]bool{}
	for i, es := range descs {
		levels[i] = d.Resolve(es, nil, nil)
		for _, l := range levels[i] {
			if !seen[l.Key] {
				seen[l.Key] = true
				buckets = append(buckets, limit.Bucket{Key: l.Key, Limit: l.Rule.Limit, SecondUnit: l.Rule.SecondUnit(), Regional: l.Rule.Regional})
			}
		}
	}
	if err := s.caps.checkBuckets(len(buckets)); err != nil {
		return nil, nil, nil, err
	}
	return d, levels, buckets, nil
}

// Buckets returns the state of the buckets the descriptors of a domain
// reach, charging nothing.
func (s *Service) Buckets(ctx context.Context, domain string, descs [][]descriptors.Entry) (*Buckets, error) {
	d, levels, buckets, err := s.reached(domain, descs)
	if err != nil {
		return nil, err
	}
	ins, ok := s.store.(Inspector)
	if !ok {
		return nil, errNotInspectable
	}
	states := make([]limit.State, len(buckets))
	at, err := ins.State(ctx, s.clock(), buckets, states)
	if err != nil {
		return nil, &storeError{err: err}
	}
	byKey := make(map[string]int, len(buckets))
	for i, b := range buckets {
		byKey[b.Key] = i
	}
	decided := s.decidedUnder(buckets)
	out := &Buckets{Domain: d.Name, At: at.UTC().Format(time.RFC3339Nano), Descriptors: make([]DescriptorBuckets, len(descs)),
		Regions: s.regionStatuses()}
	for i, es := range descs {
		db := &out.Descriptors[i]
		db.Unlimited = len(levels[i]) == 0 && d.Unlimited(es)
		db.Buckets = []BucketStatus{}
		for _, e := range es {
			db.Entries = append(db.Entries, Entry(e))
		}
		for _, l := range levels[i] {
			k := byKey[l.Key]
			b := bucketStatus(l, decided[k].Limit, states[k], at)
			b.Regions = s.regionView(buckets[k])
			db.Buckets = append(db.Buckets, b)
		}
	}
	return out, nil
}

// bucketStatus reports a level's bucket, decided under lim, in state st
// at now: a peek for what it holds, one hit for whether one more fits.
func bucketStatus(l descriptors.Level, lim limit.Limit, st limit.State, at time.Time) BucketStatus {
	peek := limit.Decide(st, lim, at, 0)
	d := debtOf(st, lim, at, peek)
	st.Counts = slices.Clone(st.Counts) // a sliding window's hit is charged in place
	one := limit.Decide(st, lim, at, 1)
	b := BucketStatus{Key: l.Key, Path: l.Rule.Path, Label: l.Rule.Label(), Limit: l.Rule.Describe(),
		Clear: peek.Clear.String(), AdmitsOne: one.Admitted, Period: periodOf(lim, st, at)}
	if peek.Admitted {
		b.Remaining = peek.Remaining // else over its size: 0
	}
	if !one.Admitted {
		b.Reset = one.Reset.String()
	}
	if d.hits > 0 {
		b.Debt, b.BackWithin = d.hits, d.backWithin.String()
	}
	return b
}

// ResetBuckets empties the buckets the descriptors of a domain reach, on
// the store (and so for every replica sharing it), and drops them from
// this replica's over-limit cache; a store that tells the other replicas
// (Redis) has them drop them from theirs. It returns their keys.
func (s *Service) ResetBuckets(ctx context.Context, domain string, descs [][]descriptors.Entry) (*Reset, error) {
	d, _, buckets, err := s.reached(domain, descs)
	if err != nil {
		return nil, err
	}
	ins, ok := s.store.(Inspector)
	if !ok {
		return nil, errNotInspectable
	}
	keys := make([]string, len(buckets))
	for i, b := range buckets {
		keys[i] = b.Key
	}
	err = ins.Reset(ctx, keys)
	s.ForgetOverLimit(keys) // whatever the store did: it may have deleted some
	if err != nil {
		return nil, &storeError{err: err}
	}
	return &Reset{Domain: d.Name, Keys: keys}, nil
}

// ForgetOverLimit drops buckets from the over-limit cache, so that calls
// for them ask the store again: they were reset, here or on another
// replica. nil drops every bucket.
func (s *Service) ForgetOverLimit(keys []string) {
	g := s.config.Load()
	if g == nil || g.cache == nil {
		return
	}
	if keys == nil {
		g.cache.clear()
		return
	}
	for _, k := range keys {
		g.cache.remove(k)
	}
}

// ParseDescriptor reads a descriptor written key=value[,key=value...], as
// GET /buckets and envoy-rls explain take it. A value may hold '=' (after
// the first); no key or value can hold ','.
func ParseDescriptor(s string) ([]descriptors.Entry, error) {
	if s == "" {
		return nil, badRequest("the descriptor is empty: want key=value[,key=value...]")
	}
	var es []descriptors.Entry
	for i, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, badRequest("descriptor %q: entry %d (%q) has no '=': want key=value[,key=value...]", clip(s), i, clip(part))
		}
		es = append(es, descriptors.Entry{Key: k, Value: v})
	}
	return es, nil
}
