// Package limit is the leaky-bucket rate-limit algorithm and the types every
// store shares.
//
// A bucket holds at most Size requests. Every DripRate, DripSize requests leak
// out. A request of n hits is admitted when the bucket has room for n more;
// there are no windows, so there are no bursts at window edges.
//
// Decide is the whole algorithm: a pure function of a bucket's State, its
// Limit, the current instant and the hits to add. DecideAll applies it to every
// bucket of one request with the all-or-nothing rule: the hits are charged to
// every bucket only if every bucket that is not in shadow mode admits them.
// Stores (the in-memory store in package memory, the Redis store) only load
// and save State around these two functions, atomically.
//
// Time is kept in whole microseconds: a State's Timestamp is a Unix time in
// microseconds and a Limit's DripRate must be a whole number of microseconds,
// so that a store that computes in microseconds (a Redis script, whose numbers
// are doubles) reaches exactly the same decisions.
package limit
