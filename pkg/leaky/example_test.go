package leaky_test

import (
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

func ExampleDecide() {
	// 100 requests a minute: a bucket of 100 that leaks one every 600ms.
	limit := leaky.Rate{RequestsPerUnit: 100, Unit: leaky.Minute}.Limit()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	var s leaky.State
	r := leaky.Decide(s, limit, t0, 100) // a burst that fills the bucket
	fmt.Println(r.Admitted, r.Remaining, r.Clear)

	s = r.State
	r = leaky.Decide(s, limit, t0.Add(time.Second), 2) // one has leaked, two do not fit
	fmt.Println(r.Admitted, r.Reset)
	// Output:
	// true 0 1m0s
	// false 200ms
}

func ExampleDecideAll() {
	user := leaky.Limit{Size: 60, DripRate: time.Second, DripSize: 1}
	trade := leaky.Limit{Size: 5, DripRate: 2 * time.Second, DripSize: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	states := []leaky.State{{}, {Counter: 5, Timestamp: t0.UnixMicro()}} // trade is full
	buckets := []leaky.Bucket{
		{Key: "user=alex", Limit: user, Hits: 1},
		{Key: "user=alex|action=trade", Limit: trade, Hits: 1},
	}
	results := make([]leaky.Result, len(buckets))
	admitted := leaky.DecideAll(states, buckets, t0, results)
	fmt.Println(admitted, results[0].State.Counter, results[1].Reset)
	// Output: false 0 2s
}
