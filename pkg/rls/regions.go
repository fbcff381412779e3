package rls

import (
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// Regions is what the service needs of the regions every limit is
// divided among (*region.Exchange): the limit this region decides a
// bucket under, and what GET /buckets and POST /explain show of them.
type Regions interface {
	// Claim is the limit this region's store decides key's bucket under.
	Claim(key string, l limit.Limit) limit.Limit
	// Bucket is key's bucket as the regions divide it.
	Bucket(key string, l limit.Limit) region.BucketView
	// Statuses is every region as this replica sees it.
	Statuses() []region.Status
}

// decidedUnder returns buckets with the limits the store decides them
// under: this region's claims of the limits divided among regions. It
// returns buckets itself when nothing is divided.
func (s *Service) decidedUnder(buckets []limit.Bucket) []limit.Bucket {
	if s.regions == nil {
		return buckets
	}
	out := make([]limit.Bucket, len(buckets))
	for i, b := range buckets {
		out[i] = b
		if !b.Regional {
			out[i].Limit = s.regions.Claim(b.Key, b.Limit)
		}
	}
	return out
}

// regionView is a bucket's view of the regions, nil when its limit is not
// divided among them.
func (s *Service) regionView(b limit.Bucket) *region.BucketView {
	if s.regions == nil || b.Regional {
		return nil
	}
	v := s.regions.Bucket(b.Key, b.Limit)
	return &v
}

// regionStatuses is every region's status, nil without regions.
func (s *Service) regionStatuses() []region.Status {
	if s.regions == nil {
		return nil
	}
	return s.regions.Statuses()
}
