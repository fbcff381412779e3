// Package memcached is a store of buckets on memcached, the reference's
// other backend (envoyproxy/ratelimit's BACKEND_TYPE=memcache): several
// replicas share their counts through one memcached, or a few sharded by
// key as the reference shards them.
//
// # Keys
//
// A fixed window of one of the reference's units (a second, minute, hour,
// day, week, 30-day month or 365-day year) sits where the reference keeps
// it: prefix + domain + "_" + key + "_" + value + "_" ... + the window's
// start in Unix seconds, holding a decimal counter, so that reference
// replicas and these count the same keys during a mixed rollout. Every
// other bucket (leaky buckets, sliding windows, calendar windows, windows
// of other lengths) has a key of its own, prefix + "rls:" + bucket key +
// ":", holding its encoded limit.State. A key memcached cannot hold
// (longer than 249 bytes, or with a space or a control byte) is replaced
// by the SHA-256 of what it would be. No key of one kind can be another's.
//
// # Decisions
//
// memcached has no scripts and no clock: the store decides with
// limit.DecideAll at the instant the service gives (so the replicas'
// clocks must agree) and writes with compare-and-swap, so a change made in
// between by anyone (a reference replica's incr too) makes the write fail
// and the decision is made again. A request of one bucket reads it and its
// lock in one command and waits while it is locked. A request of several
// buckets takes a short-lived lock per bucket with add (in key order,
// waiting for each, so two requests never deadlock), reads them, decides,
// writes each with compare-and-swap and, if a write fails, takes back
// those it made and decides again. So every algorithm is decided exactly,
// all or nothing, as the memory store decides it.
package memcached
