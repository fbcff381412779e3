package rls

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// Inspector is a store whose buckets can be read without charging them,
// and reset: what Explain and the admin endpoints need. Every store of
// this module is one.
type Inspector interface {
	// State returns the stored state of each bucket, changing nothing,
	// and the instant it is for (now, or the store's own clock).
	State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error)
	// Reset empties the buckets with these keys.
	Reset(ctx context.Context, keys []string) error
}

// errNotInspectable is a store that cannot be read without charging.
var errNotInspectable = &unsupportedError{msg: "this store cannot read or reset buckets"}

// errNoConfig is an explanation asked for before a config is loaded.
var errNoConfig = &unavailableError{msg: "no config loaded yet"}

// unknownDomain says that the config has no such domain, and which it has:
// a call for it is OK without limits, but who asks for an explanation has
// most likely mistyped it.
func unknownDomain(cfg *descriptors.Config, name string) error {
	var known []string
	for _, d := range cfg.Domains() {
		if len(known) == 10 {
			known = append(known, "...")
			break
		}
		known = append(known, strconv.Quote(d.Name))
	}
	return badRequest("unknown domain %q: a call for it is answered OK without limits; the config's domains are %s", clip(name), strings.Join(known, ", "))
}

// Explanation is how the service decides a request, and why: the answer
// of POST /explain, and of envoy-rls explain without the state. Its JSON
// is stable: fields may be added, never renamed or removed.
type Explanation struct {
	Domain string `json:"domain"`
	// File is the config file of the domain.
	File string `json:"file"`
	// At is the instant the buckets were read at (the store's clock, RFC
	// 3339); absent without state.
	At string `json:"at,omitempty"`
	// Code is the call's overall code, OK or OVER_LIMIT; Headers are the
	// response headers it would return, and Body its raw body (a
	// domain's over_limit_body). Absent without state.
	Code    string   `json:"code,omitempty"`
	Headers []Header `json:"headers,omitempty"`
	Body    string   `json:"body,omitempty"`
	// CacheRejects says this replica's over-limit cache would reject the
	// call before the store is asked (a bucket's CachedOverLimit): the
	// call is OVER_LIMIT whatever the buckets hold. The cache holds only
	// what the store found over its limit, so the two disagree only after
	// hits were given back, or a reset, that the replica did not hear of.
	CacheRejects bool                    `json:"cache_rejects,omitempty"`
	Descriptors  []DescriptorExplanation `json:"descriptors"`
	// Regions is every region a limit is divided among, as this replica
	// sees it; absent without regions.
	Regions []region.Status `json:"regions,omitempty"`
}

// Header is one response header.
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Entry is one key=value of a request descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// DescriptorExplanation is one descriptor of the request: the walk down
// the tree, each limit met, and the status the call would give it.
type DescriptorExplanation struct {
	Entries []Entry `json:"entries"`
	// Hits are what the descriptor adds: 0 checks without charging, a
	// negative number gives back.
	Hits int64 `json:"hits"`
	// Code is the descriptor's status, Deciding the level that sets it
	// (over the limit, or with the least remaining), Remaining and
	// DurationUntilReset (the time to clear, when OK) as the status
	// reports them; absent without state, or without a limit.
	Code               string    `json:"code,omitempty"`
	Deciding           *Deciding `json:"deciding,omitempty"`
	Remaining          *int64    `json:"remaining,omitempty"`
	DurationUntilReset string    `json:"duration_until_reset,omitempty"`
	// Unlimited says a node on the walk allow-lists the descriptor.
	Unlimited bool `json:"unlimited,omitempty"`
	// Walk is every node the walk reached, from the top, one per entry
	// matched.
	Walk []StepExplanation `json:"walk"`
	// Stopped is the entry no node matched, where the walk ended.
	Stopped *Stop `json:"stopped,omitempty"`
	// LimitSentByEnvoy is the descriptor's own limit, from Envoy's route:
	// it takes the place of the deepest level's limits (or is the only
	// level, keyed by every entry).
	LimitSentByEnvoy *LimitExplanation `json:"limit_sent_by_envoy,omitempty"`
}

// Stop is where a walk ended before the descriptor's last entry.
type Stop struct {
	Entry  int    `json:"entry"`
	Key    string `json:"key"`
	Value  string `json:"value"`
	Reason string `json:"reason"`
}

// Deciding names the level that decides a descriptor's status.
type Deciding struct {
	Path string `json:"path"`
	Name string `json:"name,omitempty"`
	Key  string `json:"key"`
}

// StepExplanation is one node of a walk.
type StepExplanation struct {
	// Entry is the index of the request entry the node matched.
	Entry int `json:"entry"`
	// Path is the node's place in the tree; Line its line in the
	// domain's file (0 when unknown, as for a config from xDS), or in File
	// when that is set: the file, merged into the domain, of its top-level
	// descriptor.
	Path string `json:"path"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Match is how it matched: "exact", "wildcard" or "any value".
	Match     string             `json:"match"`
	Unlimited bool               `json:"unlimited,omitempty"`
	Limits    []LimitExplanation `json:"limits,omitempty"`
}

// LimitExplanation is one limit met on the walk: its algorithm and
// parameters (as GET /config shows them), and either its bucket or why it
// is skipped.
type LimitExplanation struct {
	descriptors.LimitDescription
	// Label names the limit in metrics and headers: its name, or path.
	Label string `json:"label"`
	// Skipped says why the limit is not checked: "match: leaf",
	// "unlimited", "limit sent by Envoy", or "replaces" (ReplacedBy's
	// replaces names it).
	Skipped    string `json:"skipped,omitempty"`
	ReplacedBy string `json:"replaced_by,omitempty"`
	// Deciding marks the level that decides the descriptor's status.
	Deciding bool               `json:"deciding,omitempty"`
	Bucket   *BucketExplanation `json:"bucket,omitempty"`
}

// BucketExplanation is the bucket of a level that is checked.
type BucketExplanation struct {
	Key string `json:"key"`
	// Hits are the request's hits on the bucket, from every descriptor
	// that reaches it.
	Hits int64 `json:"hits"`
	// Shadow says the bucket is decided but never rejects (shadow_mode,
	// or -shadow-mode).
	Shadow bool `json:"shadow,omitempty"`
	// State is the bucket now; absent without state.
	State *BucketState `json:"state,omitempty"`
}

// BucketState is a bucket at the instant of the explanation, and what the
// call would make of it.
type BucketState struct {
	// Admits says whether the bucket has room for the hits.
	Admits bool `json:"admits"`
	// Remaining is what the call would report: after the hits if the
	// whole request passes, else as the bucket stays; 0 when it does not
	// admit. Clear is the time until the bucket is empty; Reset, when it
	// does not admit, until the hits fit.
	Remaining int64  `json:"remaining"`
	Clear     string `json:"clear"`
	Reset     string `json:"reset,omitempty"`
	// CachedOverLimit says this replica's over-limit cache holds the
	// bucket as over its limit for these hits: a call would be rejected
	// without asking the store.
	CachedOverLimit bool `json:"cached_over_limit,omitempty"`
	// Debt is how far past its limit the bucket counts now (charges of a
	// limit that charges always, recorded past it), and BackWithin the
	// time until it is back within; both absent when it is within.
	Debt       int64  `json:"debt,omitempty"`
	BackWithin string `json:"back_within,omitempty"`
	// Period is a calendar window's period that the bucket counts now.
	Period *Period `json:"period,omitempty"`
	// Regions is the bucket as the regions divide it: this region's
	// claim, which the rest is of, and each region's part; absent without
	// regions and for a limit of scope: region.
	Regions *region.BucketView `json:"regions,omitempty"`
}

// ExplainConfig explains a request from the config alone, without bucket
// state: the walks, the limits and the bucket keys, but no decision. The
// request is checked with the default caps; shadow is -shadow-mode.
func ExplainConfig(cfg *descriptors.Config, req *rlsv3.RateLimitRequest, shadow bool) (*Explanation, error) {
	d, err := explainable(cfg, newCaps(0, 0, 0), req)
	if err != nil {
		return nil, err
	}
	w := new(work)
	return explain(d, req, w, w.explain(d, req, modes{shadow: shadow})), nil
}

// explainable returns the request's domain, or why it cannot be explained.
func explainable(cfg *descriptors.Config, c caps, req *rlsv3.RateLimitRequest) (*descriptors.Domain, error) {
	if err := c.validate(req); err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errNoConfig
	}
	d := cfg.Domain(req.GetDomain())
	if d == nil {
		return nil, unknownDomain(cfg, req.GetDomain())
	}
	return d, nil
}

// Explain answers how the service would decide a request now, and why,
// without charging anything: every descriptor's walk, each level's bucket
// and its state, the status of each descriptor, the overall code and the
// headers. The buckets are read from the store (State) and decided with
// limit.DecideAll, as Apply decides them.
func (s *Service) Explain(ctx context.Context, req *rlsv3.RateLimitRequest) (*Explanation, error) {
	g := s.config.Load()
	var cfg *descriptors.Config
	if g != nil {
		cfg = g.config
	}
	d, err := explainable(cfg, s.caps, req)
	if err != nil {
		return nil, err
	}
	ins, ok := s.store.(Inspector)
	if !ok {
		return nil, errNotInspectable
	}
	w := new(work)
	walks := w.explain(d, req, modes{s.shadow, s.quotaMode})
	if err := s.caps.checkBuckets(len(w.buckets)); err != nil {
		return nil, err
	}
	states := make([]limit.State, len(w.buckets))
	at, err := ins.State(ctx, s.clock(), w.buckets, states)
	if err != nil {
		return nil, &storeError{err: err}
	}
	decided := s.decidedUnder(w.buckets) // the response's headers give the limits themselves
	debts := make([]debt, len(w.buckets))
	periods := make([]*Period, len(w.buckets))
	for k, b := range decided {
		debts[k] = debtOf(states[k], b.Limit, at, limit.Decide(states[k], b.Limit, at, 0)) // before DecideAll, which may charge the states in place
		periods[k] = periodOf(b.Limit, states[k], at)
	}
	limit.DecideAll(states, decided, at, w.results)
	w.now = at
	resp := s.response(d, req, w, false)

	e := explain(d, req, w, walks)
	e.At, e.Code = at.UTC().Format(time.RFC3339Nano), codeName(resp.GetOverallCode())
	for _, h := range resp.GetResponseHeadersToAdd() {
		e.Headers = append(e.Headers, Header{Key: h.GetKey(), Value: h.GetValue()})
	}
	e.Body = string(resp.GetRawBody())
	e.Regions = s.regionStatuses()
	now := s.clock() // the over-limit cache's clock
	peek := false    // a call that checks a bucket without charging it asks the store
	for _, b := range w.buckets {
		peek = peek || (b.Hits == 0 && !b.Shadow)
	}
	for i := range e.Descriptors {
		de, st, v := &e.Descriptors[i], resp.GetStatuses()[i], &w.verdicts[i]
		de.Code = codeName(st.GetCode())
		if v.binding != nil {
			remaining := int64(st.GetLimitRemaining())
			de.Remaining, de.DurationUntilReset = &remaining, st.GetDurationUntilReset().AsDuration().String()
		}
		checked(de, walks[i], w.starts[i], func(x *LimitExplanation, j int) {
			k := w.bucketOf[j]
			r := &w.results[k]
			bs := &BucketState{Admits: r.Admitted, Remaining: r.Remaining, Clear: r.Clear.String(), Period: periods[k],
				Regions: s.regionView(w.buckets[k])}
			if !r.Admitted {
				bs.Reset = r.Reset.String()
			}
			if d := debts[k]; d.hits > 0 {
				bs.Debt, bs.BackWithin = d.hits, d.backWithin.String()
			}
			if b := &w.buckets[k]; g.cache != nil && !b.Shadow && b.Hits > 0 {
				_, bs.CachedOverLimit = g.cache.get(b.Key, b.Hits, now)
				e.CacheRejects = e.CacheRejects || (bs.CachedOverLimit && !peek)
			}
			x.Bucket.State = bs
			if l := w.levels[j]; l.Rule == v.binding && !x.Bucket.Shadow {
				x.Deciding = true
				de.Deciding = &Deciding{Path: l.Rule.Path, Name: l.Rule.Name, Key: l.Key}
			}
		})
	}
	return e, nil
}

// skipReplaces is why a level whose limit another limit of the request
// replaces (envoyproxy/ratelimit's replaces) is not checked.
const skipReplaces = "replaces"

// explain builds the explanation of a resolved request, without state.
func explain(d *descriptors.Domain, req *rlsv3.RateLimitRequest, w *work, walks []descriptors.Walk) *Explanation {
	e := &Explanation{Domain: d.Name, File: d.File, Descriptors: make([]DescriptorExplanation, len(walks))}
	for i, walk := range walks {
		desc := req.GetDescriptors()[i]
		de := &e.Descriptors[i]
		de.Hits, de.Unlimited, de.Walk = w.hits[i], walk.Unlimited, []StepExplanation{}
		for _, en := range desc.GetEntries() {
			de.Entries = append(de.Entries, Entry{Key: en.GetKey(), Value: en.GetValue()})
		}
		for _, st := range walk.Steps {
			se := StepExplanation{Entry: st.Entry, Path: st.Path, Line: st.Line, Match: st.Match.String(), Unlimited: st.Unlimited}
			if st.File != d.File {
				se.File = st.File
			}
			for _, l := range st.Limits {
				se.Limits = append(se.Limits, LimitExplanation{LimitDescription: l.Rule.Describe(), Label: l.Rule.Label(), Skipped: l.Skipped})
			}
			de.Walk = append(de.Walk, se)
		}
		if walk.Override >= 0 {
			r := walk.Levels[walk.Override].Rule
			de.LimitSentByEnvoy = &LimitExplanation{LimitDescription: r.Describe(), Label: r.Label()}
		}
		if walk.Unmatched >= 0 {
			en := desc.GetEntries()[walk.Unmatched]
			de.Stopped = &Stop{Entry: walk.Unmatched, Key: en.GetKey(), Value: en.GetValue(), Reason: "no descriptor of the config matches it here"}
		}
		checked(de, walk, w.starts[i], func(x *LimitExplanation, j int) {
			k := w.bucketOf[j]
			if k < 0 {
				x.Skipped, x.ReplacedBy = skipReplaces, replacer(w.levels, x.Name)
				return
			}
			b := &w.buckets[k]
			x.Bucket = &BucketExplanation{Key: b.Key, Hits: b.Hits, Shadow: b.Shadow}
		})
	}
	return e
}

// checked calls f with each limit of a descriptor's explanation that its
// walk checks, and the index of its level in the work (start is the
// descriptor's first); limits replaced by others of the request included,
// until the first call marks them.
func checked(de *DescriptorExplanation, walk descriptors.Walk, start int, f func(x *LimitExplanation, level int)) {
	for si, st := range walk.Steps {
		for n, l := range st.Limits {
			if l.Level >= 0 && de.Walk[si].Limits[n].Skipped == "" {
				f(&de.Walk[si].Limits[n], start+l.Level)
			}
		}
	}
	if walk.Override >= 0 && de.LimitSentByEnvoy.Skipped == "" {
		f(de.LimitSentByEnvoy, start+walk.Override)
	}
}

// replacer returns the label of the first limit of levels whose replaces
// names name.
func replacer(levels []descriptors.Level, name string) string {
	for _, l := range levels {
		if slices.Contains(l.Rule.Replaces, name) {
			return l.Rule.Label()
		}
	}
	return ""
}
