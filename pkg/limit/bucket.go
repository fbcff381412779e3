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
	// Regional marks a bucket whose limit is each region's own (scope:
	// region): regions do not divide it. Decisions ignore it.
	Regional bool
	// SecondUnit marks a bucket whose limit the config counts per second
	// (its rate's unit is second, as envoyproxy/ratelimit reads unit:
	// SECOND). Decisions ignore it; a Redis store with a per-second Redis
	// keeps the bucket there.
	SecondUnit bool
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
	admitted := DecideEach(states, buckets, now, results)
	Settle(states, buckets, now, admitted, results)
	return admitted
}

// DecideEach is DecideAll's first half: it decides each bucket on its own,
// charging nothing (a leaky bucket's results hold its hits charged if they
// fit, which Settle keeps or takes back), and reports whether every bucket
// not in shadow mode admits its hits. A store that learns the request's
// answer elsewhere (another store decides some of its buckets) settles
// with that answer.
func DecideEach(states []State, buckets []Bucket, now time.Time, results []Result) bool {
	admitted := true
	for i := range buckets {
		results[i] = decideOne(states[i], buckets[i].Limit, now, buckets[i].Hits)
		if !results[i].Admitted && !buckets[i].Shadow {
			admitted = false
		}
	}
	return admitted
}

// Settle is DecideAll's second half: given results from DecideEach and the
// request's answer, it charges what DecideAll charges (every bucket that
// fits if admitted, and the buckets that charge always whatever the
// answer) and shows the others as they stay.
func Settle(states []State, buckets []Bucket, now time.Time, admitted bool, results []Result) {
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
}

// Saves reports whether a store must save the result of bucket b in a
// request that DecideAll found admitted or not: every charged bucket of an
// admitted request, and a bucket that charges always whatever the answer.
func Saves(b Bucket, admitted bool) bool {
	return admitted || (b.Always && b.Hits != 0)
}
