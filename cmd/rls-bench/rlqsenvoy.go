package main

import (
	"context"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// bucketID is one bucket's BucketId, built once: gRPC only reads a message
// to marshal it, so the Envoys that report the same bucket share it.
type bucketID struct {
	id  *rlqsv3.BucketId
	key string // pairsKey of its pairs: how an answer's bucket is found
}

// bucketIDs builds the BucketIds of indexes from, from+1, ..., from+n-1.
func bucketIDs(p pattern, from, n int) []bucketID {
	ids := make([]bucketID, n)
	for i := range ids {
		pairs := map[string]string{}
		for _, e := range p.descriptor(from + i).Entries {
			pairs[e.Key] = e.Value
		}
		ids[i] = bucketID{id: &rlqsv3.BucketId{Bucket: pairs}, key: pairsKey(pairs)}
	}
	return ids
}

// pairsKey is a BucketId's pairs in key order, equal for equal maps.
func pairsKey(pairs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pairs)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(pairs[k])
		b.WriteByte(0)
	}
	return b.String()
}

// sentReport is a report written to a stream and not answered yet.
type sentReport struct {
	at       time.Time
	buckets  int
	measured bool
}

// rlqsStream is one StreamRateLimitQuotas call. Its reports are answered
// in order (the service serves a stream's reports one after another, and
// answers each that names a bucket), so the oldest due is the one an
// answer is for.
type rlqsStream struct {
	call   rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
	due    []sentReport // guarded by the Envoy's mu
	ended  bool
}

// envoyStats is what one Envoy counted of its measured reports, and
// of the answers that came while measuring (served: whenever their
// report was sent).
type envoyStats struct {
	messages, bucketReports int64
	allowed, denied         uint64
	answered                int64
	servedMessages          int64
	servedBuckets           int64
	latencies               []time.Duration
	actions                 map[string]int64
	short                   int64 // answers with fewer actions than the report had buckets
	unknown                 int64 // actions for a bucket the Envoy does not report
	extra                   int64 // answers with no report due (any, measured or not)
	streams, streamErrors   int64
	firstErr                error
	// reassigned are, for each stream that ended before the run (in error
	// or not), the time from its end to the first answer on another.
	reassigned []time.Duration
}

// rlqsEnvoy is one emulated Envoy: its buckets, their assignments and its
// stream, which it reopens at its next report once it has ended, as Envoy
// does.
type rlqsEnvoy struct {
	client   rlqsv3.RateLimitQuotaServiceClient
	interval time.Duration
	reopen   time.Duration
	requests float64
	ids      []bucketID
	index    map[string]int
	msg      *rlqsv3.RateLimitQuotaUsageReports
	rng      *rand.Rand
	last     time.Time // the last report, zero before the first
	quit     chan struct{}
	stopOnce sync.Once
	retry    chan struct{} // a stream ended in error: reopen within reopen

	measuring atomic.Bool

	mu      sync.Mutex
	quotas  []quota
	stream  *rlqsStream
	closing bool // the run is over: a stream's end is no error
	st      envoyStats
	// endedAt is when its stream ended in error, until an answer on
	// another comes; zero otherwise.
	endedAt time.Time
}

func newRLQSEnvoy(cfg rlqsConfig, n int, ids []bucketID, conn grpc.ClientConnInterface) *rlqsEnvoy {
	e := &rlqsEnvoy{
		client:   rlqsv3.NewRateLimitQuotaServiceClient(conn),
		interval: cfg.interval,
		reopen:   cfg.reopen,
		requests: cfg.requests,
		ids:      ids,
		index:    make(map[string]int, len(ids)),
		msg:      &rlqsv3.RateLimitQuotaUsageReports{Domain: cfg.domain},
		rng:      rand.New(rand.NewPCG(cfg.seed, uint64(n))),
		quit:     make(chan struct{}),
		retry:    make(chan struct{}, 1),
		quotas:   make([]quota, len(ids)),
		st:       envoyStats{actions: map[string]int64{}},
	}
	for i, id := range ids {
		e.index[id.key] = i
		e.msg.BucketQuotaUsages = append(e.msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: id.id, TimeElapsed: &durationpb.Duration{}})
	}
	return e
}

func (e *rlqsEnvoy) measure(on bool) { e.measuring.Store(on) }

// stopTicking ends the reports; the stream is closed, its answers still
// read, until the run's context ends. From now on a stream's end is no
// error: it is the run's.
func (e *rlqsEnvoy) stopTicking() {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.stopOnce.Do(func() { close(e.quit) })
}

// pending counts the measured reports of the open stream not answered yet.
func (e *rlqsEnvoy) pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	if s := e.stream; s != nil && !s.ended {
		for _, r := range s.due {
			if r.measured {
				n++
			}
		}
	}
	return n
}

// run reports at first, then every interval on a fixed schedule (a late
// tick skips the ones it missed rather than bunch them), until quit; then
// closes its stream and waits for ctx, which ends the call. With reopen,
// a stream that ends in error is opened again, with a report, at a random
// moment within reopen.
func (e *rlqsEnvoy) run(ctx context.Context, first time.Time) {
	next := first
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	for {
		select {
		case <-ctx.Done():
			e.end()
			return
		case <-e.quit:
			e.closeSend()
			<-ctx.Done()
			e.end()
			return
		case <-e.retry:
			e.mu.Lock()
			delay := time.Duration(e.rng.Int64N(int64(e.reopen)))
			e.mu.Unlock()
			again.Reset(delay)
			continue
		case <-again.C:
			e.tick(ctx, time.Now())
			continue
		case <-t.C:
		}
		e.tick(ctx, time.Now())
		for next = next.Add(e.interval); !next.After(time.Now()); next = next.Add(e.interval) {
		}
		t.Reset(time.Until(next))
	}
}

// tick sends a report of every bucket: its requests since the last, drawn
// around -requests per interval, split by its assignment into allowed and
// denied, and the whole seconds since the last report (0 in the first,
// whose counts are each bucket's first request).
func (e *rlqsEnvoy) tick(ctx context.Context, now time.Time) {
	s := e.openStream(ctx)
	e.mu.Lock()
	if e.closing {
		// A tick that won the race with the end of the run: nothing more
		// is sent (the stream is closing, or gone).
		e.mu.Unlock()
		return
	}
	measured := e.measuring.Load()
	first := e.last.IsZero()
	elapsed := now.Sub(e.last)
	e.last = now
	var allowed, denied uint64
	for j, u := range e.msg.BucketQuotaUsages {
		n := uint64(1)
		if !first {
			n = uint64(math.Round(e.requests * (0.5 + e.rng.Float64()) * float64(elapsed) / float64(e.interval)))
			u.TimeElapsed.Seconds = int64(elapsed / time.Second)
		}
		u.NumRequestsAllowed, u.NumRequestsDenied = e.quotas[j].decide(n, elapsed.Seconds())
		allowed += u.NumRequestsAllowed
		denied += u.NumRequestsDenied
	}
	if measured {
		e.st.messages++
		e.st.bucketReports += int64(len(e.ids))
		e.st.allowed += allowed
		e.st.denied += denied
	}
	if s == nil {
		e.mu.Unlock()
		return // no stream: the usage is lost, as Envoy loses it
	}
	s.due = append(s.due, sentReport{at: time.Now(), buckets: len(e.ids), measured: measured})
	e.mu.Unlock()
	// Outside the lock: Send may wait for flow control, while the reader
	// needs the lock to take the answers that free it. The message is
	// marshalled before Send returns, so the next tick may change it.
	if err := s.call.Send(e.msg); err != nil {
		e.ended(s, err)
	}
}

// openStream returns the open stream, or opens one; nil if it cannot, or
// the run is ending.
func (e *rlqsEnvoy) openStream(ctx context.Context) *rlqsStream {
	e.mu.Lock()
	s, closing := e.stream, e.closing
	e.mu.Unlock()
	if s != nil || closing {
		return s
	}
	sctx, cancel := context.WithCancel(ctx)
	call, err := e.client.StreamRateLimitQuotas(sctx)
	if err != nil {
		cancel()
		e.mu.Lock()
		e.failed(err)
		e.mu.Unlock()
		return nil
	}
	s = &rlqsStream{call: call, cancel: cancel}
	e.mu.Lock()
	e.stream = s
	e.st.streams++
	e.mu.Unlock()
	go e.read(s)
	return s
}

// read takes the answers of s until it ends.
func (e *rlqsEnvoy) read(s *rlqsStream) {
	for {
		resp, err := s.call.Recv()
		if err != nil {
			e.ended(s, err)
			return
		}
		now := time.Now()
		e.mu.Lock()
		if !e.endedAt.IsZero() {
			e.st.reassigned = append(e.st.reassigned, now.Sub(e.endedAt))
			e.endedAt = time.Time{}
		}
		var r sentReport
		if len(s.due) == 0 {
			e.st.extra++
		} else {
			r, s.due = s.due[0], s.due[1:]
		}
		actions := resp.GetBucketAction()
		if r.buckets > 0 && e.measuring.Load() {
			e.st.servedMessages++
			e.st.servedBuckets += int64(r.buckets)
		}
		if r.measured {
			e.st.answered++
			e.st.latencies = append(e.st.latencies, now.Sub(r.at))
			if len(actions) < r.buckets {
				e.st.short++
			}
		}
		for pos, a := range actions {
			i, ok := e.find(a.GetBucketId().GetBucket(), pos)
			if !ok {
				e.st.unknown++
				continue
			}
			kind := e.quotas[i].apply(a)
			if r.measured {
				e.st.actions[kind]++
			}
		}
		e.mu.Unlock()
	}
}

// find returns the bucket an action is for: the service answers in the
// report's order, so the one at its position first.
func (e *rlqsEnvoy) find(pairs map[string]string, pos int) (int, bool) {
	if pos < len(e.ids) && maps.Equal(e.ids[pos].id.GetBucket(), pairs) {
		return pos, true
	}
	i, ok := e.index[pairsKey(pairs)]
	return i, ok
}

// ended forgets s, to be reopened at the next report. Its reports not
// answered stay unanswered.
func (e *rlqsEnvoy) ended(s *rlqsStream, err error) {
	e.mu.Lock()
	if !s.ended {
		s.ended = true
		s.due = nil
		if err != io.EOF {
			e.failed(err)
		}
		// A stream that ends before the run does, in error or not (a
		// replica killed may close its connections cleanly), is one to
		// reopen and be answered on again.
		if !e.closing && e.endedAt.IsZero() {
			e.endedAt = time.Now()
			if e.reopen > 0 {
				select {
				case e.retry <- struct{}{}:
				default:
				}
			}
		}
	}
	if e.stream == s {
		e.stream = nil
	}
	e.mu.Unlock()
	s.cancel()
}

// failed counts a stream that could not open or ended in error, unless
// the run is ending. e.mu is held.
func (e *rlqsEnvoy) failed(err error) {
	if e.closing {
		return
	}
	e.st.streamErrors++
	if e.st.firstErr == nil {
		e.st.firstErr = err
	}
}

// closeSend tells the service the Envoy is done: it answers what it has
// read, then ends the call.
func (e *rlqsEnvoy) closeSend() {
	e.mu.Lock()
	s := e.stream
	e.mu.Unlock()
	if s != nil {
		s.call.CloseSend()
	}
}

// end cancels the stream at the end of the run.
func (e *rlqsEnvoy) end() {
	e.mu.Lock()
	e.closing = true
	s := e.stream
	e.mu.Unlock()
	if s != nil {
		s.cancel()
	}
}
