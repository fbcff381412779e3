package rlqsclient

import (
	"context"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// closeGrace bounds how long Close waits for reports already handed to the
// stream to be written before it resets the stream.
const closeGrace = 2 * time.Second

// linger is how long Close lets written reports leave before the reset:
// gRPC discards a cancelled stream's unsent frames, where Envoy's codec has
// already put them on the connection.
const linger = 50 * time.Millisecond

// outgoing is one usage report handed to a stream, with the counts it
// carries, so that they are booked as reported or lost once its fate is
// known.
type outgoing struct {
	msg    *rlqsv3.RateLimitQuotaUsageReports
	counts []usageCount
}

// usageCount is one bucket's counts in a report.
type usageCount struct {
	key             string
	allowed, denied uint64
}

// stream is one StreamRateLimitQuotas call. Envoy starts its stream without
// waiting (the async client's start) and learns of a failure later, in
// onRemoteClose; so here the call is opened, written and read by goroutines,
// and Instance.stream is what Envoy's stream_ is: non-nil until the stream
// is known to be closed.
type stream struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []outgoing
	closing bool // Close: write what is queued, then stop
	ended   bool // the writer has stopped: nothing more is written
	wake    chan struct{}
	drained chan struct{} // closed when the writer stops
	wg      sync.WaitGroup
}

// startStream is startStreamImpl: it starts a stream unless the instance
// is closed, and reports whether one was started. i.mu is held.
func (i *Instance) startStream() bool {
	if i.closed || i.ctx.Err() != nil {
		return false
	}
	ctx, cancel := context.WithCancel(i.ctx)
	s := &stream{ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), drained: make(chan struct{})}
	i.stream = s
	s.wg.Add(1)
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		i.write(s)
		s.wg.Wait()
	}()
	return true
}

// send hands a report to the open stream, or drops it when there is none
// (sendUsageReportImpl). i.mu is held.
func (i *Instance) send(o outgoing) {
	if i.stream == nil || !i.stream.enqueue(o) {
		i.dropped(o)
	}
}

// enqueue queues o unless the writer has stopped.
func (s *stream) enqueue(o outgoing) bool {
	s.mu.Lock()
	if s.ended || s.closing {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, o)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// next returns the next report to write; false once the stream is
// cancelled, or closing with nothing left.
func (s *stream) next() (outgoing, bool) {
	for {
		s.mu.Lock()
		if s.ctx.Err() == nil && len(s.queue) > 0 {
			o := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return o, true
		}
		closing := s.closing
		s.mu.Unlock()
		if closing || s.ctx.Err() != nil {
			return outgoing{}, false
		}
		select {
		case <-s.wake:
		case <-s.ctx.Done():
		}
	}
}

// write opens the call, starts its reader, and writes queued reports in
// order until the stream ends; reports it could not write are lost.
func (i *Instance) write(s *stream) {
	defer s.wg.Done()
	defer close(s.drained)
	defer func() {
		s.mu.Lock()
		rest := s.queue
		s.queue, s.ended = nil, true
		s.mu.Unlock()
		i.mu.Lock()
		for _, o := range rest {
			i.dropped(o)
		}
		i.mu.Unlock()
	}()
	call, err := i.client.StreamRateLimitQuotas(s.ctx)
	if err != nil {
		i.ended(s, err)
		return
	}
	i.mu.Lock()
	i.stats.StreamsOpened++
	i.mu.Unlock()
	s.wg.Add(1)
	go i.read(s, call)
	for {
		o, ok := s.next()
		if !ok {
			return
		}
		if err := call.Send(o.msg); err != nil {
			i.mu.Lock()
			i.dropped(o)
			i.mu.Unlock()
			i.ended(s, err)
			return
		}
		i.mu.Lock()
		i.sent(o)
		i.mu.Unlock()
	}
}

// read applies the responses of the call until it ends.
func (i *Instance) read(s *stream, call rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	defer s.wg.Done()
	for {
		resp, err := call.Recv()
		if err != nil {
			i.ended(s, err)
			return
		}
		i.mu.Lock()
		// Envoy has no callbacks from a stream it has let go of.
		if i.stream == s {
			i.onResponse(resp, i.clock.Now())
		}
		i.mu.Unlock()
	}
}

// ended is onRemoteClose: the stream is forgotten, to be restarted at the
// next report tick, and its call is cancelled.
func (i *Instance) ended(s *stream, err error) {
	i.mu.Lock()
	if i.stream == s {
		i.stream = nil
		i.stats.StreamsEnded++
		i.stats.LastStreamError = err
	}
	i.mu.Unlock()
	s.cancel()
}

// shutdown writes what is queued (for at most closeGrace) and lets it
// leave, then resets the call, as an Envoy that leaves does, and waits for
// its goroutines.
func (s *stream) shutdown() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(closeGrace)
	select {
	case <-s.drained:
		t.Reset(linger)
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
	case <-t.C:
	}
	t.Stop()
	s.cancel()
	s.wg.Wait()
}

// sent books a report written to the stream. i.mu is held.
func (i *Instance) sent(o outgoing) {
	i.stats.ReportsSent++
	for _, c := range o.counts {
		if t := i.totals[c.key]; t != nil {
			t.ReportedAllowed += c.allowed
			t.ReportedDenied += c.denied
		}
	}
}

// dropped books a report that never reached a stream. i.mu is held.
func (i *Instance) dropped(o outgoing) {
	i.stats.ReportsDropped++
	for _, c := range o.counts {
		if t := i.totals[c.key]; t != nil {
			t.LostAllowed += c.allowed
			t.LostDenied += c.denied
		}
	}
}
