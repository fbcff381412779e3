package region

import (
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// maxDrip is the slowest a region's leaky bucket drains: a claim with no
// share of the rate (the others' held claims take it all) drains this
// slowly rather than never.
const maxDrip = 365 * 24 * time.Hour

// Scale returns the limit a region's own bucket enforces under claim c of
// l: a size of the claim's, rounded down (so that the regions' sizes add
// up to no more than l's), and for a leaky bucket a drip slowed to the
// claim's share of l's rate, rounded up to a whole microsecond (so that
// their drains add up to no more than l's). A window's counts do not
// drain: only its size is the claim's.
func Scale(l limit.Limit, c Claim) limit.Limit {
	out := l
	out.Size = int64(math.Floor(min(max(c.Size, 0), float64(l.Size))))
	if l.Algorithm != limit.LeakyBucket {
		return out
	}
	share := c.Share
	if share >= 1 {
		return out // the whole rate: the limit's own drip
	}
	drip := maxDrip
	if share > 0 {
		us := math.Ceil(float64(l.DripRate) / share / float64(time.Microsecond))
		drip = min(time.Duration(min(us, float64(maxDrip.Microseconds())))*time.Microsecond, maxDrip)
	}
	out.DripRate = max(drip, l.DripRate)
	return out
}
