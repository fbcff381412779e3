package storetest

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// always marks a bucket that charges its hits whatever the answer.
func always(b limit.Bucket) limit.Bucket {
	b.Always = true
	return b
}

// saturated is the longest time a figure reports: 2^53 microseconds.
const saturated = time.Duration(leaky.MaxValue) * time.Microsecond

// chargeTables are the step tables of buckets that charge always (usage
// known after the response: a check of 0 hits on the request path, a
// charge of the cost at its end), for every algorithm. T0 is 7s past a
// minute: a fixed window of a minute ends 53s after it.
func chargeTables() []table {
	const s = time.Second
	fw := Fixed(1000, time.Minute)
	lb := limit.Limit{Size: 10, DripRate: s, DripSize: 1}
	sw := Sliding(10, 10*s, s)
	perSecond := limit.Limit{Size: 1, DripRate: s, DripSize: 1}
	huge := int64(math.MaxInt64)
	return []table{
		{"FixedBudget", []call{
			one(0, always(bucket("tok", fw, 0)), outcome{true, 1000, 0, 0}),
			one(s, always(bucket("tok", fw, 600)), outcome{true, 400, 52 * s, 0}),
			one(2*s, always(bucket("tok", fw, 0)), outcome{true, 400, 51 * s, 0}),
			// The second response costs 600 more: recorded past the limit.
			one(3*s, always(bucket("tok", fw, 600)), outcome{false, 0, 50 * s, 50 * s}),
			one(4*s, always(bucket("tok", fw, 0)), outcome{false, 0, 49 * s, 49 * s}),
			one(4*s, always(bucket("tok", fw, 1)), outcome{false, 0, 49 * s, 49 * s}),
			one(53*s, always(bucket("tok", fw, 0)), outcome{true, 1000, 0, 0}), // the next window
		}},
		{"LeakyDebt", []call{
			one(0, always(bucket("lb", lb, 6)), outcome{true, 4, 6 * s, 0}),
			// 12 in a bucket of 10: over until two have leaked.
			one(0, always(bucket("lb", lb, 6)), outcome{false, 0, 12 * s, 2 * s}),
			one(s, always(bucket("lb", lb, 0)), outcome{false, 0, 11 * s, s}),
			one(2*s, always(bucket("lb", lb, 0)), outcome{true, 0, 10 * s, 0}), // back within: a check passes
			one(2*s, always(bucket("lb", lb, 1)), outcome{false, 0, 11 * s, s}),
			one(2*s, always(bucket("lb", lb, -5)), outcome{true, 4, 6 * s, 0}), // a refund, as ever
		}},
		{"SlidingDebt", []call{
			one(0, always(bucket("sw", sw, 6)), outcome{true, 4, 10 * s, 0}),
			// 12 in a window of 10: over until T0's 6 have left.
			one(s, always(bucket("sw", sw, 6)), outcome{false, 0, 10 * s, 9 * s}),
			one(5*s, always(bucket("sw", sw, 0)), outcome{false, 0, 6 * s, 5 * s}),
			one(10*s, always(bucket("sw", sw, 0)), outcome{true, 4, s, 0}),
			one(10*s, always(bucket("sw", sw, 6)), outcome{false, 0, 10 * s, s}),
		}},
		{"MixedWithAdmitted", []call{
			// A budget that charges always beside a request limit: the
			// request limit rejects the second call, the budget is charged
			// all the same; the request limit is not.
			{0, []limit.Bucket{always(bucket("mx|tok", fw, 100)), bucket("mx|req", perSecond, 1)},
				[]outcome{{true, 900, 53 * s, 0}, {true, 0, s, 0}}},
			{0, []limit.Bucket{always(bucket("mx|tok", fw, 100)), bucket("mx|req", perSecond, 1)},
				[]outcome{{true, 800, 53 * s, 0}, {false, 0, s, s}}},
			{0, []limit.Bucket{always(bucket("mx|tok", fw, 0)), bucket("mx|req", perSecond, 0)},
				[]outcome{{true, 800, 53 * s, 0}, {true, 0, s, 0}}},
			// Over the budget: the charge is recorded, and rejects the
			// request, whose request limit is then not charged.
			{2 * s, []limit.Bucket{always(bucket("mx|tok", fw, 900)), bucket("mx|req", perSecond, 1)},
				[]outcome{{false, 0, 51 * s, 51 * s}, {true, 1, 0, 0}}},
			{2 * s, []limit.Bucket{always(bucket("mx|tok", fw, 0)), bucket("mx|req", perSecond, 0)},
				[]outcome{{false, 0, 51 * s, 51 * s}, {true, 1, 0, 0}}},
		}},
		{"ShadowCharged", []call{
			{0, []limit.Bucket{always(shadow(bucket("sh|tok", Fixed(5, time.Minute), 8))), bucket("sh|req", perSecond, 1)},
				[]outcome{{false, 0, 53 * s, 53 * s}, {true, 0, s, 0}}},
			{0, []limit.Bucket{always(shadow(bucket("sh|tok", Fixed(5, time.Minute), 0)))},
				[]outcome{{false, 0, 53 * s, 53 * s}}},
		}},
		{"HugeHitsSaturate", []call{
			one(0, always(bucket("hg|fw", fw, huge)), outcome{false, 0, 53 * s, 53 * s}),
			one(0, always(bucket("hg|fw", fw, huge)), outcome{false, 0, 53 * s, 53 * s}),
			one(0, always(bucket("hg|lb", lb, huge)), outcome{false, 0, saturated, saturated}),
			one(0, always(bucket("hg|lb", lb, huge)), outcome{false, 0, saturated, saturated}),
			one(0, always(bucket("hg|sw", sw, huge)), outcome{false, 0, 10 * s, 10 * s}),
			one(0, always(bucket("hg|sw", sw, 0)), outcome{false, 0, 10 * s, 10 * s}),
		}},
	}
}

// testConcurrentCharges has workers callers charge 3 hits each at once to
// a bucket of 100 that charges always, for each algorithm: exactly 33 are
// admitted (the 34th would pass 100), and every charge is recorded, which
// refunds then measure: the count is 600.
func testConcurrentCharges(t *testing.T, newStore NewStore) {
	for _, l := range []limit.Limit{
		{Size: 100, DripRate: time.Hour, DripSize: 1},
		Sliding(100, time.Hour, time.Minute),
		Fixed(100, time.Hour),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			s := newStore(t)
			var admitted atomic.Int64
			parallel(t, workers, func(int) error {
				results := make([]limit.Result, 1)
				if err := s.Apply(context.Background(), T0, []limit.Bucket{always(bucket("tok", l, 3))}, results); err != nil {
					return err
				}
				if results[0].Admitted {
					admitted.Add(1)
				}
				return nil
			})
			if got := admitted.Load(); got != 33 {
				t.Fatalf("%d concurrent charges of 3 on %v admitted %d, want exactly 33", workers, l, got)
			}
			// 600 charged: 500 back leave exactly the limit, one more one to spare.
			if got := apply(t, s, T0, []limit.Bucket{always(bucket("tok", l, -500))}); !got[0].admitted || got[0].remaining != 0 {
				t.Fatalf("after giving 500 back: %v, want admitted with 0 remaining (600 charged)", got)
			}
			if got := apply(t, s, T0, []limit.Bucket{always(bucket("tok", l, -1))}); fmt.Sprint(got[0].remaining) != "1" {
				t.Fatalf("after giving 501 back: %v, want 1 remaining (600 charged)", got)
			}
		})
	}
}
