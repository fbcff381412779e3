package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/envoy-rls/envoy-rls/internal/rawgrpc"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Store charges what Envoys report they allowed: the buckets of the
// config, shared with the RLS service. Apply decides every bucket of one
// call as limit.DecideAll does; the buckets it is given charge always.
type Store interface {
	Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error
}

// FailureMode says what streams are sent while the store or the registry
// fails, once Options.FailStatic is over.
type FailureMode int

const (
	// FailQuiet sends nothing: each Envoy keeps its assignment until its
	// TTL, then falls back to its configured behaviour.
	FailQuiet FailureMode = iota
	// FailAllow sends ALLOW_ALL, with a short TTL.
	FailAllow
	// FailDeny sends DENY_ALL, with a short TTL.
	FailDeny
	// FailLocal divides each limit among this replica's streams alone,
	// through Options.LocalRegistry.
	FailLocal
)

// String names the mode as -failure-mode does.
func (m FailureMode) String() string {
	switch m {
	case FailAllow:
		return "allow"
	case FailDeny:
		return "deny"
	case FailLocal:
		return "local"
	}
	return "unavailable"
}

// Options configure a Service.
type Options struct {
	// Store charges reported usage; required.
	Store Store
	// Registry shares subscribers among replicas; required (a
	// MemoryRegistry for one replica).
	Registry Registry
	// LocalRegistry is what FailLocal divides with; default a
	// MemoryRegistry.
	LocalRegistry Registry
	// Config returns the config in force; nil before one is loaded.
	Config func() *descriptors.Config
	// Usage counts RLS calls' hits on subscribed buckets; nil counts none
	// (RLS calls then take no part in the division).
	Usage *Usage
	// Claim, if set, returns the part of a level's limit this replica's
	// region holds (regions: package region), what its Envoys and RLS
	// callers divide, so that one limit holds across regions for both
	// protocols; nil: the whole limit.
	Claim func(key string, l limit.Limit) limit.Limit
	// Demand, if set, is told at each report what the stream's Envoy
	// asks of each level there, allowed or denied, in requests a second,
	// until the assignments' TTL (a rate of 0 when it leaves the level):
	// its region's demand, as the RLS calls' hits are (regions: package
	// region). It must be quick and safe for concurrent use.
	Demand func(stream any, key string, l limit.Limit, perSecond float64, until time.Time)
	// Clock reads the time; default time.Now.
	Clock func() time.Time
	// Logger receives errors and, at debug level, a line per report.
	Logger *slog.Logger
	// Observer receives what metrics count; default none.
	Observer Observer
	// Unmatched is what a bucket the config has no limit for is sent:
	// AllowAll (the default, as an unmatched descriptor is OK) or DenyAll.
	Unmatched Kind
	// AbandonAfter is how long a bucket no Envoy reported any request for
	// is kept before its streams are sent AbandonAction; default
	// DefaultAbandonAfter.
	AbandonAfter time.Duration
	// FailStatic is how long, while the store or the registry fails, each
	// stream is still answered from the last division known (fail-static):
	// a replica's streams keep the part of each limit they held, which the
	// other replicas leave them (Division.Frozen), so the limit holds
	// through the fault. It runs from the last exchange with the other
	// replicas, or the first charge that failed; then FailureMode
	// answers. 0: FailureMode answers at once.
	FailStatic time.Duration
	// FailureMode says what is sent while the store or registry fails,
	// once FailStatic is over.
	FailureMode FailureMode
	// CloseConn closes the connection of the call of ctx: that of a
	// stream ended because its client did not read its answers, which
	// gRPC keeps queued behind the stream's window until the client reads
	// or its connection goes (grpcconn.Close). nil: the stream alone is
	// ended.
	CloseConn func(ctx context.Context) bool
	// StoreTimeout bounds each store and registry call; default 1s.
	StoreTimeout time.Duration
	// MaxAnswering is how many reports are served at once (read, charged,
	// divided and answered), on workers of the service's own; the others
	// wait their turn. A fleet that reconnects at once sends a first
	// report on every stream within a second: served all at once, they
	// would take every connection to the store and the CPUs from the RLS
	// calls, which then miss their deadlines. 0: DefaultAnsweringPerCPU a
	// CPU.
	MaxAnswering int
	// MaxStreams, MaxBuckets (per stream), MaxTotalBuckets (all streams
	// together) and MaxBucketsPerReport cap what clients may hold; 0 means
	// the Default* caps. MaxEntries and MaxEntryBytes cap a BucketId's
	// pairs and each key or value, as they cap an RLS descriptor.
	MaxStreams, MaxBuckets, MaxTotalBuckets, MaxBucketsPerReport, MaxEntries, MaxEntryBytes int
}

// The default caps and times.
const (
	DefaultAbandonAfter        = 10 * time.Minute
	DefaultFailStatic          = 5 * time.Minute
	DefaultMaxStreams          = 10000
	DefaultMaxBuckets          = 10000
	DefaultMaxTotalBuckets     = 100000 // about 2 KiB each with two levels (docs/rlqs.md, Memory): 200 MiB at most
	DefaultMaxBucketsPerReport = 10000
	DefaultMaxEntries          = 32
	DefaultMaxEntryBytes       = 4096
	// DefaultAnsweringPerCPU is MaxAnswering's default, per CPU: 8 on 2
	// CPUs, answering a fleet's 400 reports a second of 2,000 Envoys
	// (each about 2 ms on Redis) with room to spare, and leaving most of
	// the Redis store's 10 connections a CPU to RLS calls.
	DefaultAnsweringPerCPU = 4
)

// Service is the RateLimitQuotaService. It is safe for concurrent use.
type Service struct {
	opts    Options
	replica string // names this replica's instances in the registry
	log     *slog.Logger
	obs     Observer

	next    atomic.Uint64 // stream numbers
	streams atomic.Int64
	buckets atomic.Int64 // subscribed, all streams together
	mu      sync.Mutex
	open    map[*stream]struct{} // for Inspect and Close
	scratch sync.Pool            // of *scratch
	faults  faultLog
	// withdrawLog logs the withdrawals that failed.
	withdrawLog rareLog
	// workers serve the reports, MaxAnswering at once.
	workers *workers
	closing chan struct{}
	once    sync.Once
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Store == nil || opts.Registry == nil || opts.Config == nil {
		return nil, errors.New("rlqs: a store, a registry and a config are required")
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Observer == nil {
		opts.Observer = noObserver{}
	}
	if opts.LocalRegistry == nil {
		opts.LocalRegistry = NewMemoryRegistry(DefaultDivideEvery)
	}
	if opts.Unmatched != DenyAll {
		opts.Unmatched = AllowAll
	}
	if opts.AbandonAfter <= 0 {
		opts.AbandonAfter = DefaultAbandonAfter
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = time.Second
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.MaxStreams, DefaultMaxStreams)
	def(&opts.MaxBuckets, DefaultMaxBuckets)
	def(&opts.MaxTotalBuckets, DefaultMaxTotalBuckets)
	def(&opts.MaxBucketsPerReport, DefaultMaxBucketsPerReport)
	def(&opts.MaxEntries, DefaultMaxEntries)
	def(&opts.MaxEntryBytes, DefaultMaxEntryBytes)
	def(&opts.MaxAnswering, DefaultAnsweringPerCPU*runtime.GOMAXPROCS(0))
	id := make([]byte, 6)
	rand.Read(id)
	s := &Service{opts: opts, replica: hex.EncodeToString(id), log: opts.Logger, obs: opts.Observer,
		open: map[*stream]struct{}{}, closing: make(chan struct{}), workers: newWorkers(opts.MaxAnswering)}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// ServerOptions are the options a gRPC server serving the service needs:
// the codec that hands the stream its messages' bytes (rawgrpc), and
// passes every other message to gRPC's protobuf codec.
func (s *Service) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{rawgrpc.ServerOption()}
}

// Register registers the service on a gRPC server, as
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService. Its stream
// reads and writes its messages itself (wire.go), so it is registered
// with a handler of its own rather than the generated one; the name,
// method and file are the generated service's, for clients and
// reflection alike.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName,
		HandlerType: (*interface{ Close() })(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    rlqsv3.RateLimitQuotaService_ServiceDesc.Streams[0].StreamName,
			Handler:       func(srv any, ss grpc.ServerStream) error { return srv.(*Service).serveStream(ss) },
			ServerStreams: true,
			ClientStreams: true,
		}},
		Metadata: rlqsv3.RateLimitQuotaService_ServiceDesc.Metadata,
	}, s)
}

// serveStream serves one Envoy: its reports, answered with the
// assignments of the buckets they name, until it closes the stream, sends
// something that cannot be served, or the service closes.
func (s *Service) serveStream(ss grpc.ServerStream) error {
	if n := s.streams.Add(1); n > int64(s.opts.MaxStreams) {
		s.streams.Add(-1)
		return grpcStatus(errTooManyStreams(s.opts.MaxStreams))
	}
	defer s.streams.Add(-1)
	st := s.newStream()
	if p, ok := peer.FromContext(ss.Context()); ok && p.Addr != nil {
		st.peer = p.Addr.String()
	}
	s.mu.Lock()
	s.open[st] = struct{}{}
	s.mu.Unlock()
	err := st.serve(ss)
	s.mu.Lock()
	delete(s.open, st)
	s.mu.Unlock()
	st.withdraw(errors.Is(err, errClosing))
	return grpcStatus(err)
}

// Close ends every stream, after the drain: each Envoy keeps the
// assignments it holds until their TTL, while it reconnects to another
// replica. New streams are refused.
func (s *Service) Close() {
	s.once.Do(func() { close(s.closing) })
}

// Streams returns the streams open.
func (s *Service) Streams() int { return int(s.streams.Load()) }

// Buckets returns the buckets the open streams report, each stream's
// counted once.
func (s *Service) Buckets() int { return int(s.buckets.Load()) }

func (s *Service) newStream() *stream {
	n := s.next.Add(1)
	return &stream{svc: s, instance: s.replica + "/" + strconv.FormatUint(n, 10), rlsInstance: "rls@" + s.replica,
		subs: map[string]*sub{}, raw: map[string]*sub{}, levels: map[string]*streamLevel{}}
}
