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
	// Always charges the hits whether or not the request is admitted, past
	// the limit if need be (charge: always): usage already spent, such as
	// the tokens of a response, which must count for the budget to bind.
	// The bucket then reports OVER_LIMIT until the debt has leaked, slid or
	// reset away; a count saturates at leaky.MaxSize.
	Always bool
}

// DecideAll decides every bucket of one request together, with the
// all-or-nothing rule: results[i] is the outcome for buckets[i], whose state
// is states[i]. The request is admitted when every bucket not in shadow mode
// admits its hits, and only then are the hits charged, but for buckets that
// charge always (Bucket.Always), which are charged whatever the answer.
// DecideAll reports whether the request is admitted.
//
// A store saves every results[i].State for which Saves(buckets[i],
// admitted) holds. The others are not charged: each shows its bucket
// dripped to now, which a store may save or drop, as both lead to the same
// future decisions (a shadow bucket that had no room is left uncharged).
// A bucket that charges always reports its state after the charge: not
// admitted, with no remaining and the time until it is back within its
// limit, when the hits did not fit.
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
	for i, b := range buckets {
		switch {
		case b.Hits == 0:
		case !results[i].Admitted && b.Always:
			results[i] = force(states[i], b.Limit, now, b.Hits)
		case !results[i].Admitted:
		case admitted || b.Always:
			charge(&results[i], b.Limit, now, b.Hits)
		default:
			// Show the bucket as it stays: uncharged.
			results[i] = decideOne(states[i], b.Limit, now, 0)
		}
	}
	return admitted
}

// Saves reports whether a store must save the result of bucket b in a
// request that DecideAll found admitted or not: every charged bucket of an
// admitted request, and a bucket that charges always whatever the answer.
func Saves(b Bucket, admitted bool) bool {
	return admitted || (b.Always && b.Hits != 0)
}
