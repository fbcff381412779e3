package rls

import (
	"context"
	"encoding/json"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// Quotas is what the admin endpoints show of the Rate Limit Quota
// Service: the Envoy streams that report a bucket (package rlqs).
type Quotas interface {
	// Subscribers describes the subscribers of the bucket a BucketId of
	// domain names, as JSON-friendly values: a summary, or with all
	// every one.
	Subscribers(domain string, bucket map[string]string, all bool) any
}

// bucketRequest is the body of POST /explain for an RLQS bucket:
// {"domain": "D", "bucket_id": {"bucket": {"k": "v"}}}.
type bucketRequest struct {
	Domain   string `json:"domain"`
	BucketID *struct {
		Bucket map[string]string `json:"bucket"`
	} `json:"bucket_id"`
	// Subscribers "all" lists every subscriber, not a summary.
	Subscribers string `json:"subscribers"`
}

// asBucketRequest reads body as an RLQS bucket, if it names one
// (bucket_id: br not nil), and returns the request of one descriptor it
// stands for: its pairs in the order the domain's tree asks for them.
func (s *Service) asBucketRequest(body []byte) (req *rlsv3.RateLimitRequest, br *bucketRequest, err error) {
	br = &bucketRequest{}
	if json.Unmarshal(body, br) != nil || br.BucketID == nil {
		return nil, nil, nil
	}
	if _, err := subscribersAll(br.Subscribers); err != nil {
		return nil, br, err
	}
	es, err := s.bucketEntries(br.Domain, br.BucketID.Bucket)
	if err != nil {
		return nil, br, err
	}
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range es {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return &rlsv3.RateLimitRequest{Domain: br.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}, br, nil
}

// bucketEntries orders a BucketId's pairs as the domain's tree asks for
// them (descriptors.Domain.BucketEntries).
func (s *Service) bucketEntries(domain string, bucket map[string]string) ([]descriptors.Entry, error) {
	if len(bucket) == 0 {
		return nil, badRequest("the bucket_id has no pairs")
	}
	cfg := s.Config()
	if cfg == nil {
		return nil, errNoConfig
	}
	d := cfg.Domain(domain)
	if d == nil {
		return nil, unknownDomain(cfg, domain)
	}
	return d.BucketEntries(bucket), nil
}

// BucketQuotas is GET /buckets for an RLQS bucket: the state of its
// levels' buckets (what RLS calls and RLQS reports charge alike) and this
// replica's Envoy streams that report it, with their demands, shares and
// assignments.
type BucketQuotas struct {
	*Buckets
	Bucket      map[string]string `json:"bucket_id"`
	Subscribers any               `json:"subscribers"`
}

// BucketSubscribers answers GET /buckets?domain=D&bucket=k=v,...: its
// subscribers summed up, or every one with all
// (&subscribers=all).
func (s *Service) BucketSubscribers(ctx context.Context, domain string, bucket map[string]string, all bool) (*BucketQuotas, error) {
	es, err := s.bucketEntries(domain, bucket)
	if err != nil {
		return nil, err
	}
	b, err := s.Buckets(ctx, domain, [][]descriptors.Entry{es})
	if err != nil {
		return nil, err
	}
	return &BucketQuotas{Buckets: b, Bucket: bucket, Subscribers: s.subscribers(domain, bucket, all)}, nil
}

// QuotaExplanation is POST /explain for an RLQS bucket: the walk, and
// the bucket's subscribers on this replica, as GET /buckets shows them.
type QuotaExplanation struct {
	*Explanation
	Bucket      map[string]string `json:"bucket_id"`
	Subscribers any               `json:"subscribers"`
}

// subscribers describes a bucket's subscribers: none without the Rate
// Limit Quota Service.
func (s *Service) subscribers(domain string, bucket map[string]string, all bool) any {
	if s.quotas == nil {
		return nil
	}
	return s.quotas.Subscribers(domain, bucket, all)
}

// subscribersAll reads what a request asks of a bucket's subscribers: a
// summary ("" or "summary") or all of them ("all").
func subscribersAll(v string) (bool, error) {
	switch v {
	case "", "summary":
		return false, nil
	case "all":
		return true, nil
	}
	return false, badRequest("subscribers %q: want all, or summary (the default)", clip(v))
}

// parseBucket reads a BucketId written k=v,k=v.
func parseBucket(s string) (map[string]string, error) {
	es, err := ParseDescriptor(s)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(es))
	for _, e := range es {
		if _, dup := m[e.Key]; dup {
			return nil, badRequest("bucket %q names key %q twice", clip(s), clip(e.Key))
		}
		m[e.Key] = e.Value
	}
	return m, nil
}
