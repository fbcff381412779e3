package main

import (
	"flag"
	"log/slog"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/grpcconn"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// rlqsSettings are the -rlqs-* flags: the Rate Limit Quota Service, served
// on the gRPC port beside RLS.
type rlqsSettings struct {
	unmatched           choice[rlqs.Kind]
	abandonAfter        time.Duration
	maxStreams          int
	maxBuckets          int
	maxTotalBuckets     int
	maxBucketsPerReport int
	// failStatic is -rlqs-fail-static; failStaticGiven says it was given
	// (by flag or variable), not its default.
	failStatic      time.Duration
	failStaticGiven bool
}

func newRLQSFlags(fs *flag.FlagSet) *rlqsSettings {
	r := &rlqsSettings{unmatched: choice[rlqs.Kind]{rlqs.AllowAll, []option[rlqs.Kind]{{"allow", rlqs.AllowAll}, {"deny", rlqs.DenyAll}}}}
	fs.Var(&r.unmatched, "rlqs-unmatched", "what an RLQS bucket the config has no limit for is sent: allow (ALLOW_ALL) or deny (DENY_ALL)")
	fs.DurationVar(&r.abandonAfter, "rlqs-abandon-after", rlqs.DefaultAbandonAfter, "an RLQS bucket no Envoy reported a request of for this long is abandoned (AbandonAction), its state freed")
	fs.IntVar(&r.maxStreams, "rlqs-max-streams", rlqs.DefaultMaxStreams, "the most RLQS streams at once; beyond, ResourceExhausted")
	fs.IntVar(&r.maxBuckets, "rlqs-max-buckets", rlqs.DefaultMaxBuckets, "the most buckets one RLQS stream reports; beyond, new buckets are sent nothing")
	fs.IntVar(&r.maxTotalBuckets, "rlqs-max-buckets-total", rlqs.DefaultMaxTotalBuckets, "the most buckets all RLQS streams of this replica report together (each holds about 2 KiB with its levels); beyond, new buckets are sent nothing")
	fs.IntVar(&r.maxBucketsPerReport, "rlqs-max-buckets-per-report", rlqs.DefaultMaxBucketsPerReport, "the most buckets one RLQS report names; beyond, InvalidArgument")
	fs.DurationVar(&r.failStatic, "rlqs-fail-static", rlqs.DefaultFailStatic, "while the store fails, how long RLQS streams are still answered from the last division known, each replica keeping its part of each limit, before -failure-mode answers; 0 turns it off, -failure-mode answering once an exchange has failed for the streams' TTL (the default with -failure-mode allow, deny or local)")
	return r
}

// noteGiven notes whether -rlqs-fail-static was given. Not given, it is
// on only with the default failure mode, unavailable, whose RLQS streams
// would otherwise be sent nothing (their Envoys, once their assignments
// expire, admitting what their fallback does): allow, deny and local keep
// their meaning from the first failure.
func (r *rlqsSettings) noteGiven(fs *flag.FlagSet, mode failureMode) {
	fs.Visit(func(f *flag.Flag) { r.failStaticGiven = r.failStaticGiven || f.Name == "rlqs-fail-static" })
	if !r.failStaticGiven && mode != failUnavailable {
		r.failStatic = 0
	}
}

// quotaService is the Rate Limit Quota Service over the same store and
// config as the RLS service: on Redis (red not nil), replicas share their
// subscribers there; on memory, in process.
func quotaService(s *settings, st store, red *redis.Store, config func() *descriptors.Config, usage *rlqs.Usage, regions *region.Exchange,
	obs rlqs.Observer, log *slog.Logger) (*rlqs.Service, error) {
	var claim func(string, limit.Limit) limit.Limit
	var demand func(any, string, limit.Limit, float64, time.Time)
	if regions != nil {
		// A region's Envoys divide its part of each level, and what they
		// ask is its demand.
		claim, demand = regions.Claim, regions.Wants
	}
	var registry rlqs.Registry = rlqs.NewMemoryRegistry(rlqs.DefaultDivideEvery)
	if red != nil {
		registry = rlqs.RedisRegistry(red)
	}
	mode := rlqs.FailQuiet
	switch s.failureMode.value {
	case failAllow:
		mode = rlqs.FailAllow
	case failDeny:
		mode = rlqs.FailDeny
	case failLocal:
		mode = rlqs.FailLocal
	}
	return rlqs.New(rlqs.Options{Store: st, Registry: registry, Config: config, Usage: usage, Claim: claim, Demand: demand, Logger: log, Observer: obs,
		Unmatched: s.rlqs.unmatched.value, AbandonAfter: s.rlqs.abandonAfter, FailStatic: s.rlqs.failStatic, FailureMode: mode, StoreTimeout: s.storeTimeout,
		MaxStreams: s.rlqs.maxStreams, MaxBuckets: s.rlqs.maxBuckets, MaxTotalBuckets: s.rlqs.maxTotalBuckets, MaxBucketsPerReport: s.rlqs.maxBucketsPerReport,
		MaxEntries: s.maxEntries, MaxEntryBytes: s.maxEntryBytes, CloseConn: grpcconn.Close})
}
