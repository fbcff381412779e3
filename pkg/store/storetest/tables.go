package storetest

import (
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

type table struct {
	name  string
	calls []call
}

// one is a call on a single bucket.
func one(at time.Duration, b limit.Bucket, want outcome) call {
	return call{at, []limit.Bucket{b}, []outcome{want}}
}

func tables() []table {
	const s = time.Second
	perSecond := func(size, dripSize int64) limit.Limit {
		return limit.Limit{Size: size, DripRate: s, DripSize: dripSize}
	}

	l3 := perSecond(3, 1)
	l10x4 := perSecond(10, 4)
	l5 := limit.Limit{Size: 5, DripRate: 200 * ms, DripSize: 1}
	zero := limit.Limit{Size: 0, DripRate: time.Minute, DripSize: 1}
	user, trade := perSecond(10, 1), perSecond(2, 1)
	one1 := perSecond(1, 1)

	many := func(lastSize int64, n int, hits int64) []limit.Bucket {
		bs := make([]limit.Bucket, n)
		for i := range bs {
			bs[i] = bucket(fmt.Sprintf("many|b=%d", i), perSecond(5, 1), hits)
		}
		if n == 10 {
			bs[9].Limit = perSecond(lastSize, 1)
		}
		return bs
	}
	repeat := func(o outcome, n int) []outcome {
		out := make([]outcome, n)
		for i := range out {
			out[i] = o
		}
		return out
	}

	return []table{
		{"DripOnePerRate", []call{
			one(0, bucket("k", l3, 1), outcome{true, 2, 1 * s, 0}),
			one(0, bucket("k", l3, 1), outcome{true, 1, 2 * s, 0}),
			one(0, bucket("k", l3, 1), outcome{true, 0, 3 * s, 0}),
			one(0, bucket("k", l3, 1), outcome{false, 0, 3 * s, 1 * s}),
			one(999*ms, bucket("k", l3, 1), outcome{false, 0, 2001 * ms, 1 * ms}),
			one(1000*ms, bucket("k", l3, 1), outcome{true, 0, 3 * s, 0}),
			one(1500*ms, bucket("k", l3, 1), outcome{false, 0, 2500 * ms, 500 * ms}),
			one(10*s, bucket("k", l3, 1), outcome{true, 2, 1 * s, 0}),
		}},
		{"DripSizeAboveOne", []call{
			one(0, bucket("k", l10x4, 10), outcome{true, 0, 3 * s, 0}),
			one(999*ms, bucket("k", l10x4, 1), outcome{false, 0, 2001 * ms, 1 * ms}),
			one(1000*ms, bucket("k", l10x4, 0), outcome{true, 4, 2 * s, 0}),
			one(1200*ms, bucket("k", l10x4, 5), outcome{false, 0, 1800 * ms, 800 * ms}),
			one(1200*ms, bucket("k", l10x4, 4), outcome{true, 0, 2800 * ms, 0}),
			one(2000*ms, bucket("k", l10x4, 9), outcome{false, 0, 2 * s, 2 * s}),
			one(4000*ms, bucket("k", l10x4, 9), outcome{true, 1, 3 * s, 0}),
		}},
		{"HitsAboveOne", []call{
			one(0, bucket("k", l5, 3), outcome{true, 2, 600 * ms, 0}),
			one(0, bucket("k", l5, 3), outcome{false, 0, 600 * ms, 200 * ms}),
			one(100*ms, bucket("k", l5, 3), outcome{false, 0, 500 * ms, 100 * ms}),
			one(200*ms, bucket("k", l5, 3), outcome{true, 0, 1000 * ms, 0}),
			one(200*ms, bucket("k", l5, 6), outcome{false, 0, 1000 * ms, 1200 * ms}),
		}},
		{"SizeZero", []call{
			one(0, bucket("k", zero, 1), outcome{false, 0, 0, time.Minute}),
			one(time.Hour, bucket("k", zero, 1), outcome{false, 0, 0, time.Minute}),
			one(time.Hour, bucket("k", zero, 0), outcome{true, 0, 0, 0}),
		}},
		{"PeekDoesNotCharge", []call{
			one(0, bucket("k", perSecond(2, 1), 0), outcome{true, 2, 0, 0}),
			one(0, bucket("k", perSecond(2, 1), 1), outcome{true, 1, 1 * s, 0}),
			one(0, bucket("k", perSecond(2, 1), 0), outcome{true, 1, 1 * s, 0}),
			one(0, bucket("k", perSecond(2, 1), 1), outcome{true, 0, 2 * s, 0}),
			one(0, bucket("k", perSecond(2, 1), 0), outcome{true, 0, 2 * s, 0}),
			one(0, bucket("k", perSecond(2, 1), 1), outcome{false, 0, 2 * s, 1 * s}),
		}},
		{"Refund", []call{
			one(0, bucket("k", perSecond(5, 1), 5), outcome{true, 0, 5 * s, 0}),
			one(500*ms, bucket("k", perSecond(5, 1), -2), outcome{true, 2, 2500 * ms, 0}),
			one(500*ms, bucket("k", perSecond(5, 1), -9), outcome{true, 5, 0, 0}),
			one(600*ms, bucket("k", perSecond(5, 1), 1), outcome{true, 4, 1 * s, 0}),
		}},
		{"ExpiredBucketIsEmpty", []call{
			one(0, bucket("k", perSecond(2, 1), 2), outcome{true, 0, 2 * s, 0}),
			one(3*s, bucket("k", perSecond(2, 1), 1), outcome{true, 1, 1 * s, 0}),
			one(time.Hour, bucket("k", perSecond(2, 1), 2), outcome{true, 0, 2 * s, 0}),
		}},
		{"ClockStepsBack", []call{
			one(10*s, bucket("k", l3, 2), outcome{true, 1, 2 * s, 0}),
			// 5s earlier: the bucket leaks from 10s, so it drains 5s later,
			// and must be kept that long.
			one(5*s, bucket("k", l3, 1), outcome{true, 0, 8 * s, 0}),
			one(10500*ms, bucket("k", l3, 1), outcome{false, 0, 2500 * ms, 500 * ms}),
			one(11*s, bucket("k", l3, 1), outcome{true, 0, 3 * s, 0}),
		}},
		{"HierarchyAllOrNothing", []call{
			{0, []limit.Bucket{bucket("u", user, 1), bucket("u|t", trade, 1)}, []outcome{{true, 9, 1 * s, 0}, {true, 1, 1 * s, 0}}},
			{0, []limit.Bucket{bucket("u", user, 1), bucket("u|t", trade, 1)}, []outcome{{true, 8, 2 * s, 0}, {true, 0, 2 * s, 0}}},
			// The trade level is full: the user level is not charged.
			{0, []limit.Bucket{bucket("u", user, 1), bucket("u|t", trade, 1)}, []outcome{{true, 8, 2 * s, 0}, {false, 0, 2 * s, 1 * s}}},
			{0, []limit.Bucket{bucket("u", user, 1), bucket("u|t", trade, 1)}, []outcome{{true, 8, 2 * s, 0}, {false, 0, 2 * s, 1 * s}}},
			{0, []limit.Bucket{bucket("u", user, 1)}, []outcome{{true, 7, 3 * s, 0}}},
			{1 * s, []limit.Bucket{bucket("u", user, 1), bucket("u|t", trade, 1)}, []outcome{{true, 7, 3 * s, 0}, {true, 0, 2 * s, 0}}},
		}},
		{"ShadowNeverRejects", []call{
			{0, []limit.Bucket{bucket("a", one1, 1), shadow(bucket("b", one1, 1))}, []outcome{{true, 0, 1 * s, 0}, {true, 0, 1 * s, 0}}},
			// The full shadow bucket reports over the limit; the request passes.
			{500 * ms, []limit.Bucket{bucket("c", one1, 1), shadow(bucket("b", one1, 1))}, []outcome{{true, 0, 1 * s, 0}, {false, 0, 500 * ms, 500 * ms}}},
			{500 * ms, []limit.Bucket{bucket("c", one1, 0)}, []outcome{{true, 0, 1 * s, 0}}},
			{500 * ms, []limit.Bucket{bucket("a", one1, 1), shadow(bucket("b", one1, 1))}, []outcome{{false, 0, 500 * ms, 500 * ms}, {false, 0, 500 * ms, 500 * ms}}},
		}},
		{"ManyBucketsInOneCall", []call{
			{0, many(5, 10, 1), repeat(outcome{true, 4, 1 * s, 0}, 10)},
			{0, many(1, 10, 1), append(repeat(outcome{true, 4, 1 * s, 0}, 9), outcome{false, 0, 1 * s, 1 * s})},
			{0, many(5, 9, 1), repeat(outcome{true, 3, 2 * s, 0}, 9)},
		}},
	}
}
