package rlqsclient

import (
	"maps"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// usage reads b's usage at now into a report entry and resets it, as
// getUsageFromBucket does: the counts since the last read, and the whole
// seconds (truncated) since then. time_elapsed is always set, 0 included.
func usage(b *bucket, now time.Time) (*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, usageCount) {
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: maps.Clone(b.id)},
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
	}
	c := usageCount{key: b.key, allowed: b.allowed, denied: b.denied}
	b.allowed, b.denied = 0, 0
	b.lastReport = now
	return u, c
}

// initialReport is buildReports for a new bucket alone. i.mu is held.
func (i *Instance) initialReport(b *bucket, now time.Time) outgoing {
	u, c := usage(b, now)
	return outgoing{
		msg:    &rlqsv3.RateLimitQuotaUsageReports{Domain: i.domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}},
		counts: []usageCount{c},
	}
}

// fullReport is buildReports for every cached bucket, in the order they
// were created (Envoy's hash map has no order a server may rely on). With
// no bucket left it is a report of the domain alone, which Envoy sends
// too. i.mu is held.
func (i *Instance) fullReport(now time.Time) outgoing {
	o := outgoing{msg: &rlqsv3.RateLimitQuotaUsageReports{Domain: i.domain}}
	for _, b := range i.order {
		u, c := usage(b, now)
		o.msg.BucketQuotaUsages = append(o.msg.BucketQuotaUsages, u)
		o.counts = append(o.counts, c)
	}
	return o
}

// Report is one tick of Envoy's report timer (onSendReportsTimer): read
// every bucket's usage, restart the stream if it is closed, send. Before
// the first bucket is created there is no timer, and Report does nothing.
// With Options.Clock set, tests call it to tick; on real time the timer
// ticks by itself, and a call is a tick Envoy would not make.
func (i *Instance) Report() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.streamTried || i.closed {
		return
	}
	i.stats.Ticks++
	// The usage is read (and reset) before the stream is looked at: if the
	// stream cannot be restarted, this usage is lost, as in Envoy.
	o := i.fullReport(i.clock.Now())
	if i.stream == nil && !i.startStream() {
		i.dropped(o)
		return
	}
	i.send(o)
}

// tick runs Envoy's report timer on real time: re-armed after each tick,
// until stop is closed.
func (i *Instance) tick(stop <-chan struct{}) {
	defer i.wg.Done()
	t := time.NewTimer(i.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			i.Report()
			t.Reset(i.interval)
		}
	}
}
