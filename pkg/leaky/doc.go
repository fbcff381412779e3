// Package leaky is the leaky bucket alone: its parameters (Bucket), its
// State and one pure decision, Bucket.Decide. It knows no other algorithm,
// no request of several buckets and no store.
//
// A bucket holds at most Size requests. Every DripRate, DripSize requests
// leak out. A request of n hits is admitted when the bucket has room for n
// more; there are no windows, so there are no bursts at window edges.
//
// Package limit names the algorithm of each limit, decides a request's
// buckets together (all or nothing) and leases units; the stores
// (pkg/store) keep the state.
//
// Time is kept in whole microseconds: a State's Timestamp is a Unix time in
// microseconds and a Bucket's DripRate must be a whole number of
// microseconds, so that a store that computes in microseconds (a Redis
// script, whose numbers are doubles) reaches exactly the same decisions.
package leaky
