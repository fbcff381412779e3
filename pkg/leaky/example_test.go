package leaky_test

import (
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

func ExampleBucket_Decide() {
	// 100 requests a minute: a bucket of 100 that leaks one every 600ms.
	b := leaky.Bucket{Size: 100, DripRate: 600 * time.Millisecond, DripSize: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	var s leaky.State
	r := b.Decide(s, t0, 100) // a burst that fills the bucket
	fmt.Println(r.Admitted, r.Remaining, r.Clear)

	s = r.State
	r = b.Decide(s, t0.Add(time.Second), 2) // one has leaked, two do not fit
	fmt.Println(r.Admitted, r.Reset)

	r = b.Decide(s, t0.Add(time.Second), 0) // a peek charges nothing
	fmt.Println(r.Admitted, r.State.Counter)
	// Output:
	// true 0 1m0s
	// false 200ms
	// true 99
}
