package rlqs

import (
	"context"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/rawgrpc"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// stream is one Envoy's stream: its domain, the buckets it reports, and
// what it was sent.
type stream struct {
	svc      *Service
	instance string
	domain   string
	peer     string // its Envoy's address, for the operator's page

	mu   sync.Mutex // guards subs against Inspect
	subs map[string]*sub
	// raw finds a sub by its BucketId as its Envoy encodes it, without
	// reading the pairs: each sub's first encodings (sub.raw and its
	// aliases).
	raw map[string]*sub
	// interval is the time between its reports, as seen: what TTLs are
	// sized by.
	interval time.Duration
	// rlsInstance names this replica's RLS calls in the registry.
	rlsInstance string
	// levels are the levels its buckets meet, by key: those to withdraw
	// from when the stream ends.
	levels map[string]*streamLevel
	// orphans are charges owed on levels no bucket meets any more, for
	// the next report's call.
	orphans []limit.Bucket
	// parsed, batch and touched are a report as read, its buckets and its
	// levels, kept for the next report.
	parsed  report
	batch   []*sub
	touched []*streamLevel
	// full is set once a report found the stream at its bucket cap, so
	// that it is logged once.
	full bool
	// reports counts the reports served.
	reports uint64
	// chargeFailing is when the stream's charges began to fail, zero while
	// they succeed. Only its reports read and write it.
	chargeFailing time.Time
}

// answer is a RateLimitQuotaResponse encoded, and the actions it holds.
type answer struct {
	msg     []byte
	actions int
}

// serve reads reports and answers each until the stream ends. The
// stream's reader reads a report, has a worker serve it (workers) and
// sends its answer; the handler's own goroutine waits for the stream's
// end: the client's, the service's, or an answer its client has not taken
// for the stream's TTL (a client that stops reading: its assignments have
// expired by then). Once no report is being served, the handler returns;
// an answer still being sent is cut short by the stream's end (gRPC
// cancels the stream's context, which its send waits on), never waited
// for, so a client that does not read holds neither the handler nor the
// service's shutdown.
func (st *stream) serve(ss grpc.ServerStream) error {
	ctx := ss.Context()
	g := newGate()
	ended := make(chan error, 1)
	go func() {
		for {
			var m rawgrpc.Message
			if err := ss.RecvMsg(&m); err != nil {
				ended <- err
				return
			}
			if !g.serving() {
				return
			}
			var (
				a   answer
				err error
			)
			if !st.svc.workers.run(ctx, st.svc.closing, func() { a, err = st.serveReport(ctx, m.Bytes) }) {
				g.served()
				return // the stream or the service ended meanwhile
			}
			if err != nil {
				g.served()
				ended <- err
				return
			}
			if a.actions == 0 {
				g.served()
				continue
			}
			seq, ok := g.sending()
			if !ok {
				return
			}
			after := time.Duration(st.ttl()) * time.Second
			stall := time.AfterFunc(after, func() { g.stall(seq, after) })
			err = ss.SendMsg(&rawgrpc.Message{Bytes: a.msg})
			stall.Stop()
			if !g.done() || err != nil {
				ended <- err
				return
			}
		}
	}()
	var err error
	select {
	case <-st.svc.closing:
		err = errClosing
	case <-ctx.Done():
		err = ctx.Err()
	case err = <-ended:
		if err == io.EOF {
			err = nil
		}
	case <-g.stalled:
		err = errStalled(g.after)
		st.svc.obs.Stalled()
		if st.svc.opts.CloseConn != nil {
			st.svc.opts.CloseConn(ctx)
		}
	}
	g.stop()
	return err
}

// gate orders a stream's reader and its handler: the reader serves a
// report, then sends its answer; once the handler has stopped it, the
// reader serves and sends nothing more, and the handler waits for a
// report being served, not for an answer being sent.
type gate struct {
	mu   sync.Mutex
	idle sync.Cond
	busy bool // a report is being served
	// sent is set while an answer is being sent, seq numbering the sends.
	sent    bool
	seq     uint64
	stopped bool
	stalled chan struct{} // closed once an answer was not taken in time,
	after   time.Duration // ... which it was given
	once    sync.Once
}

func newGate() *gate {
	g := &gate{stalled: make(chan struct{})}
	g.idle.L = &g.mu
	return g
}

// serving starts serving a report, unless the handler has stopped.
func (g *gate) serving() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy = !g.stopped
	return g.busy
}

// served ends serving a report that has no answer to send.
func (g *gate) served() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy = false
	g.idle.Broadcast()
}

// sending ends serving a report and starts sending its answer, unless
// the handler has stopped; it returns the send's number.
func (g *gate) sending() (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy = false
	g.idle.Broadcast()
	if g.stopped {
		return 0, false
	}
	g.sent, g.seq = true, g.seq+1
	return g.seq, true
}

// done ends sending an answer, and reports whether to go on.
func (g *gate) done() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent = false
	return !g.stopped
}

// stall reports that send seq was not taken in after, if it is still
// being sent (its timer may fire just as it returns).
func (g *gate) stall(seq uint64, after time.Duration) {
	g.mu.Lock()
	still := g.sent && g.seq == seq
	g.mu.Unlock()
	if still {
		g.once.Do(func() {
			g.after = after
			close(g.stalled)
		})
	}
}

// stop stops the reader, once no report is being served.
func (g *gate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	for g.busy {
		g.idle.Wait()
	}
}

// serveReport reads one report and serves it, returning its answer.
func (st *stream) serveReport(ctx context.Context, msg []byte) (answer, error) {
	r, err := parseReportInto(msg, &st.parsed)
	if err != nil {
		return answer{}, badReportf("a report that is not a RateLimitQuotaUsageReports: %v", err)
	}
	a, err := st.report(ctx, r)
	clear(r.usages) // their BucketIds are the message's: let it go
	return a, err
}

// report serves one usage report: the buckets it names subscribe, their
// usage is charged, the limits are divided anew and each bucket is sent
// its assignment (renewing its TTL, or changed).
func (st *stream) report(ctx context.Context, m *report) (answer, error) {
	svc := st.svc
	now := svc.opts.Clock()
	switch {
	case st.domain == "" && m.domain == "":
		return answer{}, badReportf("the first report names no domain: set the rate_limit_quota filter's domain")
	case st.domain == "":
		st.mu.Lock() // read by the operator's page
		st.domain = m.domain
		st.mu.Unlock()
	case m.domain != "" && m.domain != st.domain:
		return answer{}, badReportf("a report for domain %q on a stream of domain %q: a stream serves one domain", clip(m.domain), clip(st.domain))
	}
	cfg := svc.opts.Config()
	if cfg == nil {
		return answer{}, &notReady{msg: "no config loaded yet"}
	}
	if cfg.Domain(st.domain) == nil {
		return answer{}, badReportf("unknown domain %q: the config's domains are %s", clip(st.domain), domainList(cfg))
	}
	usages := m.usages
	if len(usages) > svc.opts.MaxBucketsPerReport {
		return answer{}, badReportf("a report of %d buckets: at most %d (-rlqs-max-buckets-per-report)", len(usages), svc.opts.MaxBucketsPerReport)
	}
	st.mu.Lock()
	st.reports++
	var longest time.Duration
	batch := st.batch[:0]
	st.touched = st.touched[:0]
	for i, u := range usages {
		b, err := st.subscribe(u.id, cfg, now)
		if err != nil {
			st.mu.Unlock()
			return answer{}, badReportf("bucket %d of the report: its BucketId %v", i, err)
		}
		if b == nil {
			continue // over the cap: sent nothing, its Envoy's default applies
		}
		if b.cfg != cfg {
			st.resubscribe(b, cfg, now)
		}
		// The time its requests came in, on this service's clock: an
		// Envoy reports whole seconds only, and 0 in a bucket's first
		// report.
		elapsed := 0.0
		switch {
		case !b.lastAt.IsZero():
			gap := now.Sub(b.lastAt)
			elapsed = gap.Seconds()
			longest = max(longest, gap) // a periodic report's
		case u.elapsed > 0:
			// New here, not to its Envoy: a stream that moved from another
			// replica reports what came since its last report there.
			elapsed = float64(min(u.elapsed, maxElapsed))
		}
		if b.seen != st.reports { // a bucket twice in one report is answered once
			b.seen = st.reports
			batch = append(batch, b)
		}
		b.lastAt = now
		b.note(u.allowed, u.denied, elapsed, now)
		st.charge(b, u.allowed)
	}
	if longest > 0 {
		st.interval = longest
	}
	st.batch = batch
	st.demand(now)
	st.mu.Unlock()
	svc.obs.Report(len(usages))
	a := st.answer(ctx, batch, st.touched, now)
	if svc.log.Enabled(ctx, -4) { // debug
		svc.log.Debug("rlqs report", "stream", st.instance, "domain", st.domain, "buckets", len(usages), "answered", a.actions)
	}
	return a, nil
}

// subscribe returns the stream's sub for a BucketId as encoded, made if
// new; nil if the stream holds its cap of buckets. A BucketId new to the
// stream is read and checked first. Called with st.mu held.
func (st *stream) subscribe(raw []byte, cfg *descriptors.Config, now time.Time) (*sub, error) {
	if b := st.raw[string(raw)]; b != nil {
		return b, nil
	}
	svc := st.svc
	pairs, err := parsePairs(raw)
	if err == nil {
		err = checkBucket(pairs, svc.opts.MaxEntries, svc.opts.MaxEntryBytes)
	}
	if err != nil {
		return nil, err
	}
	key := bucketKey(pairs)
	if b := st.subs[key]; b != nil {
		// The same pairs encoded otherwise (a map's order is not fixed):
		// a few encodings find it at once.
		if len(b.aliases) < maxAliases {
			alias := string(raw)
			b.aliases = append(b.aliases, alias)
			st.raw[alias] = b
		}
		return b, nil
	}
	if len(st.subs) >= svc.opts.MaxBuckets || svc.buckets.Load() >= int64(svc.opts.MaxTotalBuckets) {
		if !st.full {
			st.full = true
			svc.log.Warn("rlqs: a stream reports more buckets than -rlqs-max-buckets, or all streams together than -rlqs-max-buckets-total; the others are sent nothing",
				"stream", st.instance, "domain", st.domain, "per_stream", svc.opts.MaxBuckets, "total", svc.opts.MaxTotalBuckets)
		}
		return nil, nil
	}
	svc.buckets.Add(1)
	b := &sub{key: key, raw: string(raw), active: now}
	b.resolve(cfg, st.domain, pairs)
	st.subs[key] = b
	st.raw[b.raw] = b
	st.watch(b, now)
	return b, nil
}

// resubscribe resolves b again in a new config.
func (st *stream) resubscribe(b *sub, cfg *descriptors.Config, now time.Time) {
	st.unwatch(b)
	pairs, _ := parsePairs([]byte(b.raw)) // read when it subscribed: no error
	b.resolve(cfg, st.domain, pairs)
	st.watch(b, now)
}

// withdraw takes the stream's subscribers out of the registry, when its
// Envoy ends it, so that its shares go to the others at once. When the
// service ends it (a shutdown), the entries are left to expire: the
// Envoy keeps enforcing its assignments until their TTL while it moves to
// another replica, and its shares stay counted meanwhile.
func (st *stream) withdraw(closing bool) {
	st.mu.Lock()
	levels := make([]string, 0, len(st.levels))
	st.svc.buckets.Add(-int64(len(st.subs)))
	for k, sl := range st.levels {
		levels = append(levels, k)
		if st.svc.opts.Usage != nil {
			st.svc.opts.Usage.unwatch(k)
		}
		if tell := st.svc.opts.Demand; tell != nil && !sl.regional {
			tell(st, k, sl.limit, 0, time.Time{})
		}
	}
	st.levels = map[string]*streamLevel{}
	st.mu.Unlock()
	if len(levels) == 0 || closing {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.svc.opts.StoreTimeout)
	defer cancel()
	for _, r := range []Registry{st.svc.opts.Registry, st.svc.opts.LocalRegistry} {
		if err := r.Withdraw(ctx, st.instance, levels); err != nil {
			st.svc.withdrawLog.warn(st.svc.log, "rlqs: a closed stream's buckets were not withdrawn; they expire instead", "err", err)
		}
	}
}

// maxAliases is how many encodings of one BucketId besides its first find
// it at once: the orders of a map of two pairs, and a few more. Beyond,
// one is read to be found.
const maxAliases = 3

// maxElapsed caps, in seconds, the time an Envoy says a bucket's first
// report here spans: what it may say is not checked, and a report of a
// day would make its demand nothing.
const maxElapsed = 300

// ttl is how long assignments hold: three report intervals, so that one
// lost report does not expire them, in whole seconds from 3 to 300.
func (st *stream) ttl() int64 {
	iv := st.interval
	if iv <= 0 {
		iv = 5 * time.Second // Envoy's reporting interval
	}
	return int64(min(max(math.Ceil(3*iv.Seconds()), 3), 300))
}

func domainList(cfg *descriptors.Config) string {
	var names []string
	for i, d := range cfg.Domains() {
		if i == 10 {
			names = append(names, "...")
			break
		}
		names = append(names, strconv.Quote(d.Name))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
