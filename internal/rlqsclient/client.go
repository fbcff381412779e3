package rlqsclient

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// DefaultReportInterval is how often Envoy reports, whatever the bucket
// settings' reporting_interval says (filter_persistence.cc, initTlsStore).
const DefaultReportInterval = 5 * time.Second

// Options configure an Instance as the filter config configures Envoy.
type Options struct {
	// Domain is the filter config's domain, sent in every report.
	Domain string
	// ReportInterval is the report timer's period; 0 is Envoy's 5 s.
	ReportInterval time.Duration
	// NoAssignment is no_assignment_behavior's fallback_rate_limit; nil is
	// ALLOW_ALL, Envoy's default. A new bucket's first request is denied
	// only by a blanket DENY_ALL. A token bucket here is emulated with a
	// limiter that starts full whenever the bucket enters this state:
	// Envoy's filter has no limiter for it (it would dereference a null
	// one), so that case departs from Envoy.
	NoAssignment *typev3.RateLimitStrategy
	// Expired is expired_assignment_behavior's fallback_rate_limit, in
	// force for ExpiredTTL (whole seconds, as Envoy reads it) after a
	// server assignment expires; nil: none, straight to NoAssignment.
	Expired    *typev3.RateLimitStrategy
	ExpiredTTL time.Duration
	// Clock is real time when nil. Any other clock (a ManualClock) means no
	// report timer: the caller ticks with Report.
	Clock Clock
}

// Instance is one Envoy's RLQS client for one domain: its bucket cache and
// its stream. It is safe for concurrent use.
type Instance struct {
	ctx          context.Context
	client       rlqsv3.RateLimitQuotaServiceClient
	clock        Clock
	realTime     bool
	domain       string
	interval     time.Duration
	noAssignment *typev3.RateLimitStrategy
	expired      *typev3.RateLimitStrategy
	expiredTTL   time.Duration

	mu          sync.Mutex
	buckets     map[string]*bucket
	order       []*bucket // cached buckets, by creation
	streamTried bool      // the first bucket started the timer and the stream
	stream      *stream
	closed      bool
	stop        chan struct{}
	wg          sync.WaitGroup
	misreads    []Misread
	stats       Stats
	totals      map[string]*BucketStats
	totalOrder  []string
}

// Start returns an Instance that will talk to the RLQS server on conn. Like
// Envoy, it opens no stream until the first request creates a bucket. When
// ctx ends, the instance closes.
func Start(ctx context.Context, conn grpc.ClientConnInterface, opts Options) *Instance {
	i := &Instance{
		ctx:          ctx,
		client:       rlqsv3.NewRateLimitQuotaServiceClient(conn),
		clock:        opts.Clock,
		domain:       opts.Domain,
		interval:     opts.ReportInterval,
		noAssignment: opts.NoAssignment,
		expired:      opts.Expired,
		expiredTTL:   secondsOf(opts.ExpiredTTL),
		buckets:      map[string]*bucket{},
		totals:       map[string]*BucketStats{},
		stop:         make(chan struct{}),
	}
	if i.clock == nil {
		i.clock, i.realTime = realClock{}, true
	}
	if i.interval <= 0 {
		i.interval = DefaultReportInterval
	}
	if i.noAssignment == nil {
		i.noAssignment = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
	} else {
		i.noAssignment = proto.Clone(i.noAssignment).(*typev3.RateLimitStrategy)
	}
	if i.expired != nil {
		i.expired = proto.Clone(i.expired).(*typev3.RateLimitStrategy)
	}
	context.AfterFunc(ctx, i.Close)
	return i
}

// secondsOf truncates d to whole seconds, as Envoy reads the fallback's
// expired_assignment_behavior_timeout.
func secondsOf(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d.Truncate(time.Second)
}

// Request decides one request that the filter's matchers put in bucket,
// as filter.cc's recordBucketUsage does, and counts it for the next report.
// The first request of a bucket creates it (global_client_impl.cc,
// createBucketImpl): the very first starts the report timer and the
// stream, and each creation sends a report of that bucket alone.
//
// Requests no matcher matches, or whose BucketId cannot be built, are let
// through by Envoy and never reported: do not call Request for them. A
// matcher in preview (keep_matching) is decided and counted all the same.
func (i *Instance) Request(bucket map[string]string) bool {
	key := keyOf(bucket)
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.clock.Now()
	b := i.buckets[key]
	if b == nil {
		return i.create(bucket, key, now)
	}
	i.advance(b, now)
	ok := i.decide(b, now)
	i.count(b, ok)
	return ok
}

// create makes the bucket for a first request at now. i.mu is held.
func (i *Instance) create(id map[string]string, key string, now time.Time) bool {
	if !i.streamTried && !i.closed {
		i.streamTried = true
		if i.realTime {
			i.wg.Add(1)
			go i.tick(i.stop)
		}
		i.startStream()
	}
	b := &bucket{id: maps.Clone(id), key: key, lastReport: now}
	i.enterDefault(b, now)
	i.buckets[key] = b
	i.order = append(i.order, b)
	t := i.totals[key]
	if t == nil {
		t = &BucketStats{Bucket: maps.Clone(id)}
		i.totals[key] = t
		i.totalOrder = append(i.totalOrder, key)
	}
	t.Created++
	ok := i.initialAllowed()
	i.count(b, ok)
	i.send(i.initialReport(b, now))
	return ok
}

// count books one decided request on b. i.mu is held.
func (i *Instance) count(b *bucket, allowed bool) {
	t := i.totals[b.key]
	if allowed {
		b.allowed++
		t.Allowed++
	} else {
		b.denied++
		t.Denied++
	}
}

// Assignment returns what decides bucket's requests now, and false when
// the bucket is not cached (never requested, or abandoned).
func (i *Instance) Assignment(bucket map[string]string) (Assignment, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	b := i.buckets[keyOf(bucket)]
	if b == nil {
		return Assignment{}, false
	}
	now := i.clock.Now()
	i.advance(b, now)
	return i.view(b, now), true
}

// Misreads returns every action dropped or misread so far, in order.
func (i *Instance) Misreads() []Misread {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.misreads)
}

// Stats counts what the instance did.
type Stats struct {
	// StreamsOpened counts calls the server accepted; StreamsEnded those
	// that ended other than by Close, the last with LastStreamError.
	StreamsOpened   int
	StreamsEnded    int
	LastStreamError error
	// StreamOpen is whether the instance holds a stream (Envoy's stream_
	// is set): false from a close until the next tick restarts it.
	StreamOpen bool
	// Ticks counts report timer ticks.
	Ticks int
	// ReportsSent counts reports written to a stream; ReportsDropped those
	// built while no stream was open, or lost when their stream ended.
	ReportsSent    int
	ReportsDropped int
	// ResponsesReceived counts responses; ActionsApplied their bucket
	// actions that changed a bucket, ActionsDropped those skipped.
	ResponsesReceived int
	ActionsApplied    int
	ActionsDropped    int
	// Buckets are per-BucketId totals over the instance's life (across
	// abandons), in order of first sight.
	Buckets []BucketStats
}

// BucketStats are one BucketId's totals.
type BucketStats struct {
	Bucket map[string]string
	// Created counts creations: the first request, and the first after
	// each abandon. Abandoned counts abandon actions applied.
	Created   int
	Abandoned int
	// Allowed and Denied count requests decided.
	Allowed, Denied uint64
	// ReportedAllowed and ReportedDenied are the counts in reports written
	// to a stream; LostAllowed and LostDenied those read into dropped
	// reports, or erased by an abandon before any report. What is in
	// neither is waiting for the next report.
	ReportedAllowed, ReportedDenied uint64
	LostAllowed, LostDenied         uint64
}

// Stats returns a snapshot of the counts.
func (i *Instance) Stats() Stats {
	i.mu.Lock()
	defer i.mu.Unlock()
	s := i.stats
	s.StreamOpen = i.stream != nil
	for _, k := range i.totalOrder {
		t := *i.totals[k]
		t.Bucket = maps.Clone(t.Bucket)
		s.Buckets = append(s.Buckets, t)
	}
	return s
}

// Close stops the report timer and closes the stream as an Envoy that
// leaves: reports already handed to the stream are written, then the call
// is reset. Requests are still decided afterwards, but nothing is sent.
func (i *Instance) Close() {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return
	}
	i.closed = true
	s := i.stream
	i.stream = nil
	close(i.stop)
	i.mu.Unlock()
	if s != nil {
		s.shutdown()
	}
	i.wg.Wait()
}
