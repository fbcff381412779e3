package rlqs

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// BucketView is what GET /buckets and POST /explain show of an RLQS
// bucket: each of its levels as divided (on every replica: how many
// subscribe, their demand, the fill level, the largest shares here), and
// this replica's streams that report the bucket, the largest shares
// first: a few by default, all when asked.
type BucketView struct {
	Levels []LevelSummary `json:"levels"`
	// Streams counts this replica's streams reporting the bucket; Listed
	// are those shown, Complete whether that is all of them.
	Streams  int          `json:"streams_here"`
	Listed   []Subscriber `json:"streams"`
	Complete bool         `json:"complete"`
}

// DefaultShown is how many streams and shares a summary lists.
const DefaultShown = 10

// Subscriber is one stream of this replica that reports a bucket.
type Subscriber struct {
	// Stream names the stream: this replica's id, and its number.
	Stream string `json:"stream"`
	// Demand is the requests per second its Envoy asked for lately
	// (allowed and denied); absent before a report spanned any time.
	Demand *float64 `json:"demand_per_second,omitempty"`
	// Levels are the bucket's levels (their bucket keys), each with the
	// stream's share of its limit at the last report.
	Levels []LevelShare `json:"levels"`
	// Assignment is what the stream was last sent for the bucket, and
	// SentAt when it last changed.
	Assignment AssignmentView `json:"assignment"`
	SentAt     string         `json:"changed_at,omitempty"`
	// LastReport is when the bucket was last reported.
	LastReport string `json:"last_report,omitempty"`
}

// LevelShare is a subscriber's share of one level's limit.
type LevelShare struct {
	Key   string  `json:"key"`
	Share float64 `json:"share_per_second"`
}

// AssignmentView is an assignment as JSON.
type AssignmentView struct {
	Kind          string  `json:"kind"`
	MaxTokens     uint32  `json:"max_tokens,omitempty"`
	TokensPerFill uint32  `json:"tokens_per_fill,omitempty"`
	FillInterval  int64   `json:"fill_interval_seconds,omitempty"`
	Rate          float64 `json:"rate_per_second,omitempty"`
	TTL           int64   `json:"ttl_seconds"`
}

// Subscribers is Bucket, for the admin endpoints (package rls's Quotas).
func (s *Service) Subscribers(domain string, bucket map[string]string, all bool) any {
	return s.Bucket(domain, bucket, all)
}

// Bucket describes the bucket a BucketId of domain names (the same
// pairs), for GET /buckets: a summary, or with all every stream here and
// every share of each level.
func (s *Service) Bucket(domain string, bucket map[string]string, all bool) *BucketView {
	top := DefaultShown
	if all {
		top = -1
	}
	key := bucketKey(bucket)
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.open))
	for st := range s.open {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	out := &BucketView{Levels: []LevelSummary{}, Listed: []Subscriber{}}
	var levels []string
	for _, st := range streams {
		st.mu.Lock()
		if st.domain == domain {
			if b := st.subs[key]; b != nil {
				out.Streams++
				out.Listed = append(out.Listed, subscriberOf(st, b))
				if levels == nil {
					for _, l := range b.levels {
						levels = append(levels, l.Key)
					}
				}
			}
		}
		st.mu.Unlock()
	}
	if levels == nil {
		levels = s.levelsOf(domain, bucket)
	}
	for _, l := range levels {
		if sum, ok := s.opts.Registry.Summary(l, top); ok {
			out.Levels = append(out.Levels, sum)
		}
	}
	slices.SortFunc(out.Listed, func(a, b Subscriber) int {
		return cmp.Or(cmp.Compare(b.Assignment.Rate, a.Assignment.Rate), cmp.Compare(a.Stream, b.Stream))
	})
	if top >= 0 && len(out.Listed) > top {
		out.Listed = out.Listed[:top]
	}
	out.Complete = len(out.Listed) == out.Streams
	return out
}

// levelsOf is the level keys a BucketId of domain resolves to in the
// config in force.
func (s *Service) levelsOf(domain string, bucket map[string]string) []string {
	cfg := s.opts.Config()
	if cfg == nil {
		return nil
	}
	b := &sub{}
	b.resolve(cfg, domain, bucket)
	keys := make([]string, len(b.levels))
	for i, l := range b.levels {
		keys[i] = l.Key
	}
	return keys
}

func subscriberOf(st *stream, b *sub) Subscriber {
	v := Subscriber{Stream: st.instance, Levels: []LevelShare{}, Assignment: AssignmentView{
		Kind: b.sent.Kind.String(), MaxTokens: b.sent.MaxTokens, TokensPerFill: b.sent.TokensPerFill,
		FillInterval: b.sent.FillInterval, Rate: b.sent.Rate(), TTL: b.sent.TTL}}
	if d := b.demand(); !math.IsInf(d, 0) {
		v.Demand = &d
	}
	for _, l := range b.levels {
		v.Levels = append(v.Levels, LevelShare{Key: l.Key, Share: math.Max(l.share, 0)})
	}
	if !b.sentAt.IsZero() {
		v.SentAt = b.sentAt.UTC().Format(time.RFC3339Nano)
	}
	if !b.lastAt.IsZero() {
		v.LastReport = b.lastAt.UTC().Format(time.RFC3339Nano)
	}
	return v
}
