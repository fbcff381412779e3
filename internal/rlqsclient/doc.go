// Package rlqsclient is, for tests, the client side of Envoy's Rate Limit
// Quota Service filter (envoy.filters.http.rate_limit_quota): one Envoy's
// bucket cache and StreamRateLimitQuotas stream for one domain. It replays
// what Envoy sends and does with what it is told, so that a test can hold
// an RLQS server to what real Envoys would enforce, and count every bucket
// action Envoy would drop or misread (Instance.Misreads).
//
// It follows Envoy's source/extensions/filters/http/rate_limit_quota
// (global_client_impl.cc, filter.cc, filter_persistence.cc) and the
// AtomicTokenBucketImpl of source/common/common/token_bucket_impl:
//
//   - The stream and a report timer start with the first bucket. A stream
//     that ends is restarted only by the next tick; a bucket created
//     meanwhile has its first report read (its counts reset) and dropped.
//   - A new bucket's first request is allowed unless no_assignment_behavior
//     is a blanket DENY_ALL, and is reported at once, alone, with a
//     time_elapsed of 0.
//   - Each tick reports every cached bucket, idle ones included: the counts
//     since its last report and the whole seconds since then.
//   - Actions are matched to buckets by their pairs. Without a bucket_id,
//     for an unknown bucket, with requests_per_time_unit or no strategy,
//     they are dropped. abandon_action erases the bucket.
//   - A token bucket refills continuously at tokens_per_fill over the fill
//     interval's whole seconds. A token bucket action keeps the limiter
//     when max_tokens, tokens_per_fill and the fill interval's nanos match
//     the cached one (not its seconds); otherwise the new limiter starts
//     full if there was none, else at the old one's share of tokens.
//   - An assignment lasts its TTL's whole seconds (unset: none at all),
//     then expired_assignment_behavior for its timeout, then
//     no_assignment_behavior.
package rlqsclient
