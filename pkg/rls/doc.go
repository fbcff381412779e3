// Package rls is the Envoy rate-limit service (envoy.service.ratelimit.v3):
// it validates a ShouldRateLimit request, resolves its descriptors to
// buckets with package descriptors, asks the store to decide them all at
// once, and builds the response and its headers. It reads no flag or file
// and opens no port itself: cmd/envoy-rls wires it.
//
// A request is admitted only if every bucket of every descriptor admits it;
// then all are charged, else none is. A descriptor's status is the most
// restrictive of its levels: OVER_LIMIT if any level is over, the least
// remaining, the longest time to reset.
//
// Explain answers how a request would be decided now, and why, without
// charging it: the walks of package descriptors, the buckets' state read
// with the store's State, and the response built by the call's own code.
// AdminHandler serves it, and the buckets' state and reset, to operators.
//
// gRPC codes: InvalidArgument for a malformed request, Unavailable when the
// store fails, DeadlineExceeded or Canceled when the call ends first; never
// Unknown. Requests for unknown domains, or whose descriptors match no
// limit, are OK.
//
// An Observer is told of every call and store call, for metrics; with
// Options.Tracing, every call is also an OpenTelemetry span, with a child
// span per store call.
package rls
