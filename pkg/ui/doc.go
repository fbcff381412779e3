// Package ui is the operator's page of the admin address: its files,
// embedded in the binary (assets/), and the JSON endpoints it reads every
// second or two, which scripts may read too:
//
//	GET /ui/status   the service: version, mode, store health, config, uptime
//	GET /ui/limits   each domain's limits and their decisions per second
//	GET /ui/refused  the buckets refused most in the last minute
//	GET /ui/rlqs     the RLQS streams and the levels they share
//
// Activity is the rls.Observer that counts what the last two read: per
// limit, a ring of per-second counts; for refused buckets, a heavy-hitters
// summary of fixed size. Its memory is bounded whatever the number of
// keys, and it allocates nothing on a call's path but when it first meets
// a limit. SameOrigin guards the admin endpoints that change state.
package ui
