package rlqs

import (
	"context"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// stream is one Envoy's stream: its domain, the buckets it reports, and
// what it was sent.
type stream struct {
	svc      *Service
	instance string
	domain   string

	mu   sync.Mutex // guards subs against Inspect
	subs map[string]*sub
	// interval is the time between its reports, as seen: what TTLs are
	// sized by.
	interval time.Duration
	// published counts, per level key, the stream's buckets subscribed
	// there: the levels to withdraw from when the stream ends.
	published map[string]int
	// owed is what its Envoy allowed that a failed store call did not
	// charge, by level key, for the next report's call.
	owed map[string]limit.Bucket
	// full is set once a report found the stream at its bucket cap, so
	// that it is logged once.
	full bool
}

// serve reads reports and answers each until the stream ends.
func (st *stream) serve(rs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := rs.Context()
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	ended := make(chan error, 1)
	go func() {
		for {
			m, err := rs.Recv()
			if err != nil {
				ended <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-st.svc.closing:
			return errClosing
		case err := <-ended:
			if err == io.EOF {
				return nil
			}
			return err
		case m := <-reports:
			resp, err := st.report(ctx, m)
			if err != nil {
				return err
			}
			if len(resp.GetBucketAction()) > 0 {
				if err := rs.Send(resp); err != nil {
					return err
				}
			}
		}
	}
}

// report serves one usage report: the buckets it names subscribe, their
// usage is charged, the limits are divided anew and each bucket is sent
// its assignment (renewing its TTL, or changed).
func (st *stream) report(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	svc := st.svc
	now := svc.opts.Clock()
	switch {
	case st.domain == "" && m.GetDomain() == "":
		return nil, badReportf("the first report names no domain: set the rate_limit_quota filter's domain")
	case st.domain == "":
		st.domain = m.GetDomain()
	case m.GetDomain() != "" && m.GetDomain() != st.domain:
		return nil, badReportf("a report for domain %q on a stream of domain %q: a stream serves one domain", clip(m.GetDomain()), clip(st.domain))
	}
	cfg := svc.opts.Config()
	if cfg == nil {
		return nil, &notReady{msg: "no config loaded yet"}
	}
	if cfg.Domain(st.domain) == nil {
		return nil, badReportf("unknown domain %q: the config's domains are %s", clip(st.domain), domainList(cfg))
	}
	usages := m.GetBucketQuotaUsages()
	if len(usages) > svc.opts.MaxBucketsPerReport {
		return nil, badReportf("a report of %d buckets: at most %d (-rlqs-max-buckets-per-report)", len(usages), svc.opts.MaxBucketsPerReport)
	}
	st.mu.Lock()
	var longest time.Duration
	batch := make([]*sub, 0, len(usages))
	seen := make(map[*sub]bool, len(usages))
	for i, u := range usages {
		if err := checkBucket(u.GetBucketId(), svc.opts.MaxEntries, svc.opts.MaxEntryBytes); err != nil {
			st.mu.Unlock()
			return nil, badReportf("bucket %d of the report: its BucketId %v", i, err)
		}
		b := st.subscribe(u.GetBucketId(), cfg, now)
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
		case u.GetTimeElapsed().GetSeconds() > 0:
			// New here, not to its Envoy: a stream that moved from another
			// replica reports what came since its last report there.
			elapsed = float64(min(u.GetTimeElapsed().GetSeconds(), maxElapsed))
		}
		b.lastAt = now
		b.note(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), elapsed, now)
		if !seen[b] {
			seen[b] = true
			batch = append(batch, b)
		}
		st.charge(b, u.GetNumRequestsAllowed())
	}
	if longest > 0 {
		st.interval = longest
	}
	st.mu.Unlock()
	svc.obs.Report(len(usages))
	resp := st.answer(ctx, batch, now)
	if svc.log.Enabled(ctx, -4) { // debug
		svc.log.Debug("rlqs report", "stream", st.instance, "domain", st.domain, "buckets", len(usages), "answered", len(resp.GetBucketAction()))
	}
	return resp, nil
}

// subscribe returns the stream's sub for a BucketId, made if new; nil if
// the stream holds its cap of buckets. Called with st.mu held.
func (st *stream) subscribe(id *rlqsv3.BucketId, cfg *descriptors.Config, now time.Time) *sub {
	key := bucketKey(id)
	if b := st.subs[key]; b != nil {
		return b
	}
	svc := st.svc
	if len(st.subs) >= svc.opts.MaxBuckets || svc.buckets.Load() >= int64(svc.opts.MaxTotalBuckets) {
		if !st.full {
			st.full = true
			svc.log.Warn("rlqs: a stream reports more buckets than -rlqs-max-buckets, or all streams together than -rlqs-max-buckets-total; the others are sent nothing",
				"stream", st.instance, "domain", st.domain, "per_stream", svc.opts.MaxBuckets, "total", svc.opts.MaxTotalBuckets)
		}
		return nil
	}
	svc.buckets.Add(1)
	b := &sub{id: id, key: key, active: now}
	b.resolve(cfg, st.domain)
	st.subs[key] = b
	st.watch(b, now)
	return b
}

// resubscribe resolves b again in a new config.
func (st *stream) resubscribe(b *sub, cfg *descriptors.Config, now time.Time) {
	st.unwatch(b)
	b.resolve(cfg, st.domain)
	st.watch(b, now)
}

// watch notes b's levels as the stream's, and has RLS calls on them
// counted from now.
func (st *stream) watch(b *sub, now time.Time) {
	if st.published == nil {
		st.published = map[string]int{}
	}
	for _, l := range b.levels {
		if st.published[l.Key] == 0 && st.svc.opts.Usage != nil {
			st.svc.opts.Usage.watch(l.Key, now)
		}
		st.published[l.Key]++
	}
}

// unwatch undoes watch.
func (st *stream) unwatch(b *sub) {
	for _, l := range b.levels {
		if st.published[l.Key]--; st.published[l.Key] <= 0 {
			delete(st.published, l.Key)
			if st.svc.opts.Usage != nil {
				st.svc.opts.Usage.unwatch(l.Key)
			}
		}
	}
}

// charge adds what b's Envoy allowed to what the report charges, on every
// level of b. Called with st.mu held.
func (st *stream) charge(b *sub, allowed uint64) {
	if allowed == 0 {
		return
	}
	if st.owed == nil {
		st.owed = map[string]limit.Bucket{}
	}
	hits := int64(min(allowed, maxReported))
	for _, l := range b.levels {
		c := st.owed[l.Key]
		c.Key, c.Limit, c.Always = l.Key, l.Rule.Limit, true
		c.Hits = min(c.Hits+hits, maxReported)
		st.owed[l.Key] = c
	}
}

// withdraw takes the stream's subscribers out of the registry, when its
// Envoy ends it, so that its shares go to the others at once. When the
// service ends it (a shutdown), the entries are left to expire: the
// Envoy keeps enforcing its assignments until their TTL while it moves to
// another replica, and its shares stay counted meanwhile.
func (st *stream) withdraw(closing bool) {
	st.mu.Lock()
	levels := make([]string, 0, len(st.published))
	st.svc.buckets.Add(-int64(len(st.subs)))
	for k := range st.published {
		levels = append(levels, k)
		if st.svc.opts.Usage != nil {
			st.svc.opts.Usage.unwatch(k)
		}
	}
	st.published = nil
	st.mu.Unlock()
	if len(levels) == 0 || closing {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.svc.opts.StoreTimeout)
	defer cancel()
	for _, r := range []Registry{st.svc.opts.Registry, st.svc.opts.LocalRegistry} {
		if err := r.Withdraw(ctx, st.instance, levels); err != nil {
			st.svc.log.Warn("rlqs: a closed stream's buckets were not withdrawn; they expire instead", "err", err)
		}
	}
}

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
