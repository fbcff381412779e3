// Package limit is what a limit is, whatever its algorithm: Limit, State,
// DecideAll, leases and rates. It decides but keeps nothing: where State
// lives is pkg/store's business, and each algorithm's own decision is
// package leaky's or package window's.
//
// A Limit names its Algorithm and its parameters, and a State is what a
// store keeps for one bucket of it.
//
// Decide decides one bucket by its limit's algorithm. DecideAll decides
// every bucket of one request together with the all-or-nothing rule: the
// hits are charged to every bucket only if every bucket that is not in
// shadow mode admits them. Lease is the step of a replica that decides
// locally. Rate and Unit translate envoyproxy/ratelimit's requests per unit
// into a Limit and back.
//
// All of these are pure: stores (pkg/store) only load and save State around
// them, atomically, and this package knows nothing of where State lives.
//
// Time is kept in whole microseconds: a State's Timestamp is a Unix time in
// microseconds and every duration of a Limit a whole number of them, so that
// a store that computes in microseconds (a Redis script, whose numbers are
// doubles) reaches exactly the same decisions.
package limit
