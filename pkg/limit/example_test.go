package limit_test

import (
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

func ExampleDecide() {
	// 100 requests a minute: a bucket of 100 that leaks one every 600ms.
	l := limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}.Limit()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	var s limit.State
	r := limit.Decide(s, l, t0, 100) // a burst that fills the bucket
	fmt.Println(r.Admitted, r.Remaining, r.Clear)

	s = r.State
	r = limit.Decide(s, l, t0.Add(time.Second), 2) // one has leaked, two do not fit
	fmt.Println(r.Admitted, r.Reset)
	// Output:
	// true 0 1m0s
	// false 200ms
}

func ExampleDecideAll() {
	user := limit.Limit{Size: 60, DripRate: time.Second, DripSize: 1}
	trade := limit.Limit{Size: 5, DripRate: 2 * time.Second, DripSize: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	states := []limit.State{{}, {Counter: 5, Timestamp: t0.UnixMicro()}} // trade is full
	buckets := []limit.Bucket{
		{Key: "user=alex", Limit: user, Hits: 1},
		{Key: "user=alex|action=trade", Limit: trade, Hits: 1},
	}
	results := make([]limit.Result, len(buckets))
	admitted := limit.DecideAll(states, buckets, t0, results)
	fmt.Println(admitted, results[0].State.Counter, results[1].Reset)
	// Output: false 0 2s
}
