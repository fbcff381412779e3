package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Sliding returns a sliding-window limit.
func Sliding(size int64, window, resolution time.Duration) limit.Limit {
	return limit.Limit{Algorithm: limit.SlidingWindow, Size: size, Window: window, Resolution: resolution}
}

// Fixed returns a fixed-window limit.
func Fixed(size int64, window time.Duration) limit.Limit {
	return limit.Limit{Algorithm: limit.FixedWindow, Size: size, Window: window}
}

// windowTables are the windows' step tables through a store, and requests
// that mix algorithms. T0 is 7s past a minute: fixed windows of 10s and 1m
// end 3s and 53s after it.
func windowTables() []table {
	const s = time.Second
	sw := Sliding(5, 10*s, s)
	fw := Fixed(3, 10*s)
	lb := limit.Limit{Size: 5, DripRate: s, DripSize: 1}
	sw2, fwm := Sliding(2, 10*s, s), Fixed(10, time.Minute)
	mix := func(hits int64) []limit.Bucket {
		return []limit.Bucket{bucket("mix|lb", lb, hits), bucket("mix|sw", sw2, hits), bucket("mix|fw", fwm, hits)}
	}
	return []table{
		{"Sliding", []call{
			one(0, bucket("sw", sw, 1), outcome{true, 4, 10 * s, 0}),
			one(0, bucket("sw", sw, 3), outcome{true, 1, 10 * s, 0}),
			one(0, bucket("sw", sw, 2), outcome{false, 0, 10 * s, 10 * s}), // 4 + 2 > 5: T0's 4 leave at T0+10s
			one(2500*ms, bucket("sw", sw, 1), outcome{true, 0, 9500 * ms, 0}),
			one(9500*ms, bucket("sw", sw, 1), outcome{false, 0, 2500 * ms, 500 * ms}),
			one(9500*ms, bucket("sw", sw, 0), outcome{true, 0, 2500 * ms, 0}), // a peek at a full window
			one(10*s, bucket("sw", sw, 1), outcome{true, 3, 10 * s, 0}),       // T0's 4 have left
			one(10*s, bucket("sw", sw, 6), outcome{false, 0, 10 * s, 10 * s}),
			one(10*s, bucket("sw", sw, -1), outcome{true, 4, 10 * s, 0}), // a refund, from the newest
			one(100*s, bucket("sw", sw, 0), outcome{true, 5, 0, 0}),      // long idle: empty
		}},
		{"SlidingManySubWindows", []call{
			one(0, bucket("sw1000", Sliding(3, 1000*s, s), 2), outcome{true, 1, 1000 * s, 0}),
			one(999*s, bucket("sw1000", Sliding(3, 1000*s, s), 2), outcome{false, 0, s, s}),
			one(1000*s, bucket("sw1000", Sliding(3, 1000*s, s), 2), outcome{true, 1, 1000 * s, 0}),
		}},
		{"Fixed", []call{
			one(0, bucket("fw", fw, 2), outcome{true, 1, 3 * s, 0}),
			one(s, bucket("fw", fw, 2), outcome{false, 0, 2 * s, 2 * s}),
			one(s, bucket("fw", fw, 1), outcome{true, 0, 2 * s, 0}),
			one(3*s, bucket("fw", fw, 3), outcome{true, 0, 10 * s, 0}), // a new window: the whole limit again
			one(3*s, bucket("fw", fw, 0), outcome{true, 0, 10 * s, 0}),
			one(13*s, bucket("fw", fw, 4), outcome{false, 0, 0, 10 * s}), // over the limit: the next window
		}},
		{"ShadowWindow", []call{
			{0, []limit.Bucket{bucket("sh|lb", lb, 2), shadow(bucket("sh|sw", Sliding(1, 10*s, s), 2))},
				[]outcome{{true, 3, 2 * s, 0}, {false, 0, 0, 10 * s}}},
			{0, []limit.Bucket{bucket("sh|lb", lb, 0), bucket("sh|sw", Sliding(1, 10*s, s), 0)},
				[]outcome{{true, 3, 2 * s, 0}, {true, 1, 0, 0}}}, // the shadow window was not charged
		}},
		{"MixedAllOrNothing", []call{
			{0, mix(1), []outcome{{true, 4, s, 0}, {true, 1, 10 * s, 0}, {true, 9, 53 * s, 0}}},
			{0, mix(1), []outcome{{true, 3, 2 * s, 0}, {true, 0, 10 * s, 0}, {true, 8, 53 * s, 0}}},
			// The sliding window rejects: the bucket and the fixed window
			// are shown, and left, uncharged.
			{0, mix(1), []outcome{{true, 3, 2 * s, 0}, {false, 0, 10 * s, 10 * s}, {true, 8, 53 * s, 0}}},
			{10 * s, mix(1), []outcome{{true, 4, s, 0}, {true, 1, 10 * s, 0}, {true, 7, 43 * s, 0}}},
		}},
	}
}

// testConcurrentWindows has many callers race for one window of each kind
// and counts the admitted: exactly the limit.
func testConcurrentWindows(t *testing.T, newStore NewStore) {
	for _, l := range []limit.Limit{Sliding(100, time.Hour, time.Minute), Fixed(100, time.Hour)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) { raceOneBucket(t, newStore(t), l) })
	}
}

// testConcurrentMixed races requests over a hierarchy of three algorithms:
// a sliding window per user, a fixed window per action below it, and a
// leaky bucket beside: the tightest decides, and a rejected request
// charges no level.
func testConcurrentMixed(t *testing.T, s Store) {
	user := Sliding(50, time.Hour, time.Minute)
	trade := Fixed(10, time.Hour)
	view := limit.Limit{Size: 1000, DripRate: time.Hour, DripSize: 1}
	tr, vw := racePaths(t, s,
		[]limit.Bucket{bucket("mx|user=alex", user, 1), bucket("mx|user=alex|action=trade", trade, 1)},
		[]limit.Bucket{bucket("mx|user=alex", user, 1), bucket("mx|user=alex|action=view", view, 1)})
	// Views may take the user's 50 before 10 trades have passed.
	if tr > 10 || tr+vw != 50 {
		t.Fatalf("admitted %d trades and %d views, want at most 10 trades and exactly 50 in all", tr, vw)
	}
	// Rejected requests charged nothing: each level holds exactly what was
	// admitted through it.
	got := apply(t, s, T0, []limit.Bucket{bucket("mx|user=alex", user, 0), bucket("mx|user=alex|action=trade", trade, 0), bucket("mx|user=alex|action=view", view, 0)})
	tradeClear := time.Duration(0)
	if tr > 0 {
		tradeClear = 53*time.Minute + 53*time.Second // the hour's window ends then
	}
	want := fmt.Sprint([]outcome{{true, 0, time.Hour - 7*time.Second, 0}, {true, 10 - tr, tradeClear, 0}, {true, 1000 - vw, time.Duration(vw) * time.Hour, 0}})
	if fmt.Sprint(got) != want {
		t.Fatalf("after the run: got %v, want %v: only admitted requests charged", got, want)
	}
}
