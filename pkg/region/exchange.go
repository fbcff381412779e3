package region

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Board is a region's store as the exchange uses it: where every region's
// replicas write their reports, each as its field, and read the others'.
type Board interface {
	// ExchangeReport writes report as field's, valid for ttl, and
	// returns every other field's live report. It must not keep report
	// past the call.
	ExchangeReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error)
}

// Poster is a Board that also takes a report without reading the others
// back: what a replica writes to the other regions' stores, whose reports
// it does not read (it reads its own region's). A Board that is not one
// is written to with ExchangeReport, its answer left unread.
type Poster interface {
	// PostReport writes report as field's, valid for ttl. It must not
	// keep report past the call.
	PostReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) error
}

// Posted is a report as a Board holds it: its field ("region/replica")
// and its encoding.
type Posted struct {
	Field, Report string
}

// Options configure an Exchange.
type Options struct {
	// Region is this replica's region; Regions every region, its own
	// included (in any order: the exchange sorts them).
	Region  string
	Regions []string
	// Own is the region's own store; Peers every other region's, by name.
	Own   Board
	Peers map[string]Board
	// Interval is the time between two exchanges; Silence how long a
	// region may be silent before its claims are given back.
	Interval, Silence time.Duration
	// Clock reads the time; default time.Now.
	Clock func() time.Time
	// Logger receives the exchanges' failures, once a change.
	Logger *slog.Logger
	// Observer receives what the metrics count; default none.
	Observer Observer
}

// Observer receives what the metrics count. Its methods must be quick
// and safe for concurrent use.
type Observer interface {
	// Exchanged is an exchange with a region's store (this region's
	// own included): err nil, or why it failed.
	Exchanged(region string, err error)
}

type noObserver struct{}

func (noObserver) Exchanged(string, error) {}

// Exchange is one replica's part in dividing every limit among regions:
// it counts what this replica is asked and admits of each bucket, reports
// it every interval to every region's store, reads every region's
// reports from its own, and works out the claims its decisions run
// under. It is safe for concurrent use.
type Exchange struct {
	opts    Options
	replica string // this replica's name, random
	field   string // its field on the boards: region/replica
	// published is its last report, encoded: the exchange loop's own,
	// its buffer used again at the next. reported is how many buckets it
	// named: what the next makes room for.
	published []byte
	reported  int
	// parsed are the reports last read of each field ("region/replica")
	// and taken into the ledger, as read: one read again (a replica's
	// report stays on the store until its next) is not parsed again.
	// The exchange loop's, under lmu.
	parsed map[string]string
	// ledger is the exchange loop's; the views read it too, under lmu.
	lmu    sync.Mutex
	ledger *Ledger
	// uses are this replica's buckets, by key hash: *use. ordered are
	// the same, in the order of their keys up to sorted, then in the
	// order they were made: what the exchange loop goes through twice an
	// interval (faster than through the map), putting them in order first.
	// omu guards them; use adds to ordered.
	uses    sync.Map
	omu     sync.Mutex
	ordered []*use
	sorted  int
	// merged is room for ordered's next merge, and mine for the buckets
	// a division takes: the exchange loop's.
	merged []*use
	mine   []keyedBucket
	claims atomic.Pointer[claimTable]
	// last is when each region's store was last exchanged with, Unix
	// nanoseconds (0: never), by region.
	last map[string]*atomic.Int64
	// failed counts, by region, the exchanges with its store that failed.
	failed map[string]*atomic.Int64
	// replicas is how many replicas this region had at the last
	// division: each drains its own count by that part of the region's.
	replicas atomic.Int64
	// failing says, by region, whether its store's last exchange failed:
	// what the log says once a change.
	mu      sync.Mutex
	failing map[string]bool
}

// New returns the exchange of a replica of opts.Region.
func New(opts Options) (*Exchange, error) {
	if opts.Region == "" || opts.Own == nil || opts.Interval <= 0 {
		return nil, fmt.Errorf("region: a region, its store and an interval are required")
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
	regions := slices.Clone(opts.Regions)
	if !slices.Contains(regions, opts.Region) {
		regions = append(regions, opts.Region)
	}
	slices.Sort(regions)
	id := make([]byte, 6)
	rand.Read(id)
	x := &Exchange{opts: opts, replica: hex.EncodeToString(id), last: map[string]*atomic.Int64{}, failed: map[string]*atomic.Int64{}, failing: map[string]bool{},
		parsed: map[string]string{}}
	x.replicas.Store(1)
	x.field = opts.Region + "/" + x.replica
	x.ledger = NewLedger(opts.Region, regions, x.silenceEpochs(), opts.Interval/2)
	for _, r := range regions {
		x.last[r], x.failed[r] = &atomic.Int64{}, &atomic.Int64{}
	}
	x.claims.Store(&claimTable{})
	return x, nil
}

func (x *Exchange) silenceEpochs() int64 {
	return max(int64(x.opts.Silence/x.opts.Interval), 1)
}

// Scaled returns the limit this replica's store decides key under: l
// under this region's claim, or under an equal part of it when no region
// has reported the bucket yet (every region starting on it at once takes
// its equal part, no more).
func (x *Exchange) Scaled(key uint64, l limit.Limit) limit.Limit {
	c, ok := x.claims.Load().lookup(key)
	if !ok {
		n := float64(len(x.ledger.regions))
		c = Claim{Size: float64(l.Size) / n, Share: 1 / n}
	}
	return Scale(l, c)
}

// Claim returns the limit this replica's region holds of the bucket of
// key (its claim's, as Scaled): what RLQS divides among the region's
// Envoys and RLS callers.
func (x *Exchange) Claim(key string, l limit.Limit) limit.Limit { return x.Scaled(KeyHash(key), l) }

// Publish reports epoch's counts (the interval just ended) to this
// region's store and every peer's. It returns the error of the own
// store's write; a peer's that fails is counted, never waited for past
// half an interval.
//
// The own store goes first, and the peers only if it took the report: a
// report the peers count while this replica's own division cannot run
// would have them divide as if it held claims it does not work out.
func (x *Exchange) Publish(ctx context.Context, epoch int64, now time.Time) error {
	rep := x.report(epoch, now)
	// No board keeps it past its call: the buffer serves the next too.
	x.published = AppendReport(x.published[:0], rep)
	x.lmu.Lock()
	x.ledger.Take(rep)
	x.lmu.Unlock()
	if err := x.collect(ctx, now); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for name, b := range x.opts.Peers {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, x.opts.Interval/2)
			defer cancel()
			var err error
			if p, ok := b.(Poster); ok {
				err = p.PostReport(pctx, now, x.field, x.published, x.ttl())
			} else {
				_, err = b.ExchangeReport(pctx, now, x.field, x.published, x.ttl())
			}
			x.exchanged(name, now, err)
			if err != nil {
				x.lmu.Lock()
				x.ledger.Undelivered(name, epoch)
				x.lmu.Unlock()
			}
		})
	}
	wg.Wait()
	return nil
}

// collect writes this replica's last report to its own store again (it
// is the same) and keeps every report the store holds in the ledger.
func (x *Exchange) collect(ctx context.Context, now time.Time) error {
	octx, cancel := context.WithTimeout(ctx, x.opts.Interval/2)
	defer cancel()
	got, err := x.opts.Own.ExchangeReport(octx, now, x.field, x.published, x.ttl())
	x.exchanged(x.opts.Region, now, err)
	if err != nil {
		return err
	}
	x.lmu.Lock()
	defer x.lmu.Unlock()
	for _, p := range got {
		region, replica, ok := strings.Cut(p.Field, "/")
		if !ok {
			continue
		}
		if was, ok := x.parsed[p.Field]; ok && was == p.Report {
			continue // taken as it is: taking it again changes nothing
		}
		if r, perr := parseReport(region, replica, p.Report, x.ledger.spare()); perr == nil {
			x.ledger.Take(r)
			x.parsed[p.Field] = p.Report
		}
	}
	return nil
}

// ttl is how long a report stays on a store: as long as a region may be
// silent, so that a replica that starts finds the last word of each.
func (x *Exchange) ttl() time.Duration { return max(x.opts.Silence, 3*x.opts.Interval) }

// report is this replica's report of epoch: each bucket it was asked or
// still counts; buckets idle as long as a region may be silent are
// forgotten.
func (x *Exchange) report(epoch int64, now time.Time) Report {
	secs := x.opts.Interval.Seconds()
	claims := x.claims.Load()
	x.lmu.Lock()
	list, late := x.ledger.spare(), x.ledger.lateHere()
	x.lmu.Unlock()
	rep := Report{Region: x.opts.Region, Replica: x.replica, Epoch: epoch, Late: late, list: slices.Grow(list[:0], x.reported)}
	full, forgot := false, false
	next := 0 // claims' next key: the uses and the claims go in the same order
	for _, u := range x.inOrder() {
		key := u.key
		for next < len(claims.keys) && claims.keys[next] < key {
			next++
		}
		claimed := next < len(claims.keys) && claims.keys[next] == key
		var c Claim
		if claimed {
			c = claims.claims[next]
		}
		share := x.drainShare(c, claimed)
		u.mu.Lock()
		u.advance(now, share)
		asked, count, size, rate := u.asked, u.count, u.limit.Size, u.rate
		wanted := u.wanted(now)
		u.asked = 0
		if asked == 0 && wanted == 0 {
			u.idle++
		}
		gone := u.idle > x.silenceEpochs() && count == 0
		u.mu.Unlock()
		if gone {
			x.uses.CompareAndDelete(key, u)
			u.gone, forgot = true, true
			continue
		}
		if (asked > 0 || wanted > 0 || count > 0) && !full {
			rep.list = append(rep.list, keyed{key: key, Record: Record{Demand: float64(asked)/secs + wanted, Usage: count,
				Bucket: Bucket{Size: float64(size), Rate: rate}}})
			full = len(rep.list) == MaxReportBuckets
		}
	}
	if forgot {
		x.forget()
	}
	// In the order of their keys, as inOrder gave them: a report's list
	// has one a key.
	rep.list = slices.CompactFunc(rep.list, func(a, b keyed) bool { return a.key == b.key })
	x.reported = len(rep.list)
	if full {
		x.opts.Logger.Warn("region: this replica used more buckets in an interval than a report holds; the others go unreported", "most", MaxReportBuckets)
	}
	return rep
}

// Divide reads every report of the epoch before from this region's
// store, works out the claims of epoch from them and puts them in force.
// If the store cannot be read, the claims in force stay.
func (x *Exchange) Divide(ctx context.Context, epoch int64, now time.Time) error {
	if err := x.collect(ctx, now); err != nil {
		return err
	}
	// This replica's buckets, in the order of their keys.
	mine := x.mine[:0]
	for _, u := range x.inOrder() {
		u.mu.Lock()
		mine = append(mine, keyedBucket{u.key, Bucket{Size: float64(u.limit.Size), Rate: u.rate}})
		u.mu.Unlock()
	}
	x.mine = mine
	x.lmu.Lock()
	claims := x.ledger.claims(epoch, mine)
	x.ledger.Forget(epoch)
	for field := range x.parsed {
		if !x.ledger.holds(field) {
			delete(x.parsed, field) // forgotten: taken again if read again
		}
	}
	x.replicas.Store(int64(x.ledger.Replicas(x.opts.Region, epoch)))
	x.claims.Store(claims)
	x.lmu.Unlock()
	return nil
}

// Run exchanges every interval until ctx ends: at each multiple of the
// interval since the Unix epoch it publishes the interval just ended,
// and half an interval later puts the claims worked out of it in force.
func (x *Exchange) Run(ctx context.Context) {
	iv := x.opts.Interval
	x.prepare(ctx)
	for {
		now := x.opts.Clock()
		next := time.Unix(0, (now.UnixNano()/int64(iv)+1)*int64(iv)) // a multiple since the Unix epoch
		if !sleep(ctx, next.Sub(now)) {
			return
		}
		epoch := next.UnixNano() / int64(iv)
		if err := x.Publish(ctx, epoch-1, next); err != nil {
			continue // its own store failed: the claims in force stay
		}
		if !sleep(ctx, next.Add(iv/2).Sub(x.opts.Clock())) {
			return
		}
		_ = x.Divide(ctx, epoch, x.opts.Clock()) // failed: the claims in force stay
	}
}

// preparer is a Board that can get ready for its first exchange: a
// connection open, what it runs loaded.
type preparer interface {
	Prepare(ctx context.Context) error
}

// prepare gets every store ready for the first exchange, waiting for
// them at most an interval: a link's round trips to open a connection
// would otherwise fall in the first exchange's time, and fail it. One
// that is not ready by then is exchanged with as it is.
func (x *Exchange) prepare(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, x.opts.Interval)
	defer cancel()
	var wg sync.WaitGroup
	for _, b := range append([]Board{x.opts.Own}, slices.Collect(maps.Values(x.opts.Peers))...) {
		if p, ok := b.(preparer); ok {
			wg.Go(func() { _ = p.Prepare(ctx) }) // a failure shows in the exchanges
		}
	}
	wg.Wait()
}

// exchanged notes an exchange with region's store at now, and logs when
// its result changes.
func (x *Exchange) exchanged(region string, now time.Time, err error) {
	if err == nil {
		x.last[region].Store(now.UnixNano())
	} else {
		x.failed[region].Add(1)
	}
	x.opts.Observer.Exchanged(region, err)
	x.mu.Lock()
	was := x.failing[region]
	x.failing[region] = err != nil
	x.mu.Unlock()
	switch {
	case err != nil && !was:
		x.opts.Logger.Warn("region: exchanging reports with a region's store fails; the claims in force stay", "region", region, "err", err)
	case err == nil && was:
		x.opts.Logger.Info("region: exchanging reports with a region's store works again", "region", region)
	}
}

// LastExchange is when region's store was last exchanged with; zero if
// never.
func (x *Exchange) LastExchange(region string) time.Time {
	if a := x.last[region]; a != nil && a.Load() != 0 {
		return time.Unix(0, a.Load())
	}
	return time.Time{}
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
