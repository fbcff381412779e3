package limit

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// Lease is one step of a replica that decides locally (the local-first
// mode): it gives back ret units it was granted at the instant at and did
// not use, then takes up to ask more, as many as the bucket has room for
// at now. It returns the units granted (0 <= granted <= ask) and the
// bucket's result with them charged, whose State and TTL a store saves.
//
// A grant is charged like admitted hits, so units granted to replicas are
// never more than the limit allows. A leaky bucket takes the units back
// as a refund (negative hits); a window takes them from the (sub-)window
// they were charged to, if it still counts it (Uncharge). Negative ret or
// ask count as 0.
//
// Lease is pure, and allocates nothing for a leaky bucket or a fixed
// window.
func Lease(s State, l Limit, now time.Time, ret int64, at time.Time, ask int64) (granted int64, r Result) {
	ret, ask = min(max(ret, 0), leaky.MaxValue), min(max(ask, 0), leaky.MaxValue)
	if ret > 0 {
		if l.Algorithm == LeakyBucket {
			s = decideOne(s, l, now, -ret).State
		} else {
			s = Uncharge(s, l, at, ret)
		}
	}
	r = decideOne(s, l, now, 0)
	granted = min(ask, r.Remaining)
	if !r.Admitted || granted <= 0 {
		return 0, r
	}
	r = decideOne(s, l, now, granted)
	charge(&r, l, now, granted)
	return granted, r
}
