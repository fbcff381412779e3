package rlqs

import (
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// Subscriber is one stream of this replica that reports a bucket, as GET
// /buckets shows it.
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

// Subscribers returns this replica's streams that report the bucket a
// BucketId of domain names (the same pairs), for GET /buckets.
func (s *Service) Subscribers(domain string, bucket map[string]string) any {
	key := bucketKey(&rlqsv3.BucketId{Bucket: bucket})
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.open))
	for st := range s.open {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	out := []Subscriber{}
	for _, st := range streams {
		st.mu.Lock()
		if st.domain == domain {
			if b := st.subs[key]; b != nil {
				out = append(out, subscriberOf(st, b))
			}
		}
		st.mu.Unlock()
	}
	return out
}

func subscriberOf(st *stream, b *sub) Subscriber {
	v := Subscriber{Stream: st.instance, Levels: []LevelShare{}, Assignment: AssignmentView{
		Kind: b.sent.Kind.String(), MaxTokens: b.sent.MaxTokens, TokensPerFill: b.sent.TokensPerFill,
		FillInterval: b.sent.FillInterval, Rate: b.sent.Rate(), TTL: b.sent.TTL}}
	if d := b.demand(); !math.IsInf(d, 0) {
		v.Demand = &d
	}
	for i, l := range b.levels {
		v.Levels = append(v.Levels, LevelShare{Key: l.Key, Share: math.Max(b.share[i], 0)})
	}
	if !b.sentAt.IsZero() {
		v.SentAt = b.sentAt.UTC().Format(time.RFC3339Nano)
	}
	if !b.lastAt.IsZero() {
		v.LastReport = b.lastAt.UTC().Format(time.RFC3339Nano)
	}
	return v
}
