// Package rlqs is Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3): instead of a call per request,
// each Envoy sorts requests into buckets, enforces an assignment for each
// (a token bucket, or a blanket rule) and reports on one stream, every
// few seconds, how many requests of each it allowed and denied. This
// package is the server end: it keeps the limits of the same config the
// RLS service keeps, and divides each among the Envoys that report it, so
// that a limit of 100/s means 100/s whatever the number of Envoys.
//
// A bucket's BucketId (an unordered map) resolves like a request
// descriptor whose entries are its pairs in the order the domain's tree
// asks for them (descriptors.Domain.Order); every level on its path
// counts. Each level's limit is divided max-min fair among the
// subscribers that report it on every replica (Divide, a pure function):
// each Envoy stream, and the RLS calls each replica serves on it. The
// replicas share who subscribes, with each one's demand, through a
// Registry (in process, or Redis). What the Envoys allowed is charged to
// the same buckets RLS calls charge, as usage (charge: always), so the
// two protocols divide one limit.
//
// An assignment is a token bucket of the share (Next), sent on every
// report so that its TTL is renewed; Envoy keeps its bucket, and the
// tokens in it, while what it is sent is unchanged, and refills a changed
// one, so a share is sent anew only when it moved enough to matter, its
// burst the same part of the limit's size.
package rlqs
