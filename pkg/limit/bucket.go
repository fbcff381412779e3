package limit

import "time"

// Bucket is one bucket of a request, as a store receives it.
type Bucket struct {
	// Key is the bucket's identity in the store. Keys are unique within one
	// request: the caller merges repeated buckets, adding up their hits.
	Key string
	// Limit is what the bucket admits: its algorithm and parameters.
	Limit Limit
	// Hits is the number of requests to add: 0 checks without charging,
	// a negative number gives requests back.
	Hits int64
	// Shadow marks a bucket that is decided and reported but never rejects
	// the request.
	Shadow bool
}

// DecideAll decides every bucket of one request together, with the
// all-or-nothing rule: results[i] is the outcome for buckets[i], whose state
// is states[i]. The request is admitted when every bucket not in shadow mode
// admits its hits, and only then are the hits charged. DecideAll reports
// whether the request is admitted.
//
// When it is, a store saves every results[i].State (a shadow bucket that had
// no room is left uncharged). When it is not, no bucket is charged: each
// result shows its bucket dripped to now, which a store may save or drop, as
// both lead to the same future decisions.
//
// The buckets may have any mix of algorithms. states, buckets and results
// must have the same length. DecideAll is pure and allocates nothing, but
// for the counts of a sliding window charged for the first time; a charged
// sliding window's Counts in results share memory with its Counts in states,
// which are changed.
func DecideAll(states []State, buckets []Bucket, now time.Time, results []Result) bool {
	admitted := true
	for i := range buckets {
		results[i] = decideOne(states[i], buckets[i].Limit, now, buckets[i].Hits)
		if !results[i].Admitted && !buckets[i].Shadow {
			admitted = false
		}
	}
	if admitted {
		for i, b := range buckets {
			if results[i].Admitted && b.Hits != 0 {
				charge(&results[i], b.Limit, now, b.Hits)
			}
		}
		return true
	}
	for i := range buckets {
		if results[i].Admitted && buckets[i].Hits != 0 {
			// Show the bucket as it stays: uncharged.
			results[i] = decideOne(states[i], buckets[i].Limit, now, 0)
		}
	}
	return false
}
