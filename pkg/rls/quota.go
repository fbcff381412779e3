package rls

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// refundQuotaRejected gives back what a request the quota rule rejected
// was charged. The store sees quota buckets as shadow buckets, which never
// reject, so a request whose every quota descriptor is over reaches the
// store as admitted and its other buckets are charged; the service then
// answers OVER_LIMIT, and a rejected request charges nothing (but for what
// charges always). The refund is a second store call, made only then; if
// it fails, the buckets stay charged until they drain. It reports whether
// it gave anything back: the results then show the buckets as they stay.
func (s *Service) refundQuotaRejected(ctx context.Context, now time.Time, w *work) bool {
	if !storeAdmitted(w) {
		return false // rejected by the store: nothing was charged
	}
	var refunds []limit.Bucket
	var index []int
	for k, b := range w.buckets {
		if b.Always || b.Hits <= 0 || !w.results[k].Admitted {
			continue // charged always, or not charged (a shadow or quota bucket without room)
		}
		b.Hits = -b.Hits
		refunds = append(refunds, b)
		index = append(index, k)
	}
	if len(refunds) == 0 {
		return false
	}
	results := make([]limit.Result, len(refunds))
	if err := s.call(ctx, now, StoreApply, refunds, results); err != nil {
		s.log.Warn("rate-limit store failed to give back the charge of a request rejected by quota mode: its limits stay charged until they drain", "err", err)
		return false
	}
	for n, k := range index {
		w.results[k] = results[n]
	}
	return true
}

// storeAdmitted reports whether the store admitted the request, and so
// charged its buckets: every bucket that could reject it had room.
func storeAdmitted(w *work) bool {
	for k, b := range w.buckets {
		if !b.Shadow && !w.results[k].Admitted {
			return false
		}
	}
	return true
}
