package ui

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// RingSeconds is how many seconds of decisions Activity keeps per limit.
const RingSeconds = 300

// MaxSeries bounds the limits (domain and label) Activity counts: those
// met after are not counted. Each costs about 5 KiB.
const MaxSeries = 2048

// maxRules bounds the rules Activity remembers; past it, it forgets them
// all and meets them again (a reload brings new rules, and a limit sent by
// Envoy is a rule of its own call).
const maxRules = 4 * MaxSeries

// Activity counts the decisions of the service, as an rls.Observer: per
// limit, allowed and refused per second over the last RingSeconds; the
// refused buckets in a Hitters summary. An admitted decision costs a map
// read and an atomic add (its second from Run's clock); a refused one
// reads the time and takes the summary's lock too. It is safe for
// concurrent use; the zero value is not: use NewActivity.
type Activity struct {
	now     func() time.Time
	clock   atomic.Int64 // Run's clock, in Unix nanoseconds; 0 when it does not run
	hitters *Hitters

	rules sync.Map // *descriptors.Rule -> *series

	mu      sync.Mutex // guards what follows, met off the fast path
	series  map[seriesKey]*series
	nrules  int
	discard series // counts the limits past MaxSeries, never read
}

type seriesKey struct{ domain, label string }

// NewActivity returns an Activity reading the time with now (time.Now
// when nil), with a Hitters summary of capacity counters per slice.
func NewActivity(now func() time.Time, capacity int) *Activity {
	if now == nil {
		now = time.Now
	}
	return &Activity{now: now, hitters: NewHitters(capacity), series: map[seriesKey]*series{}}
}

var _ rls.Observer = (*Activity)(nil)

// Limit implements rls.Observer: one decision of one level, at the time
// Run's clock says, if it runs (reading the time is most of the cost of
// counting), else at the time read now.
func (a *Activity) Limit(domain string, rule *descriptors.Rule, key string, hits int64, r *limit.Result, shadow bool) {
	if r.Admitted || shadow {
		sec := a.clock.Load() / int64(time.Second)
		if sec == 0 {
			sec = a.now().Unix()
		}
		a.seriesOf(domain, rule).allowed[slotOf(sec)].add(sec)
		return
	}
	var now time.Time
	if ns := a.clock.Load(); ns != 0 {
		now = time.Unix(0, ns)
	} else {
		now = a.now()
	}
	a.LimitAt(now, domain, rule, key, r, shadow)
}

// clockTick is how often Run's clock is set: a decision may be counted
// up to that much before its time (in the second before its own, its reset
// that much sooner).
const clockTick = 50 * time.Millisecond

// Run keeps the clock decisions are counted by, until ctx ends.
func (a *Activity) Run(ctx context.Context) {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	defer a.clock.Store(0)
	for {
		a.clock.Store(a.now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// LimitAt counts a decision made at now. A shadow limit's refusal lets
// the call through: it counts as allowed.
func (a *Activity) LimitAt(now time.Time, domain string, rule *descriptors.Rule, key string, r *limit.Result, shadow bool) {
	s := a.seriesOf(domain, rule)
	sec := now.Unix()
	if r.Admitted || shadow {
		s.allowed[slotOf(sec)].add(sec)
		return
	}
	s.refused[slotOf(sec)].add(sec)
	a.hitters.Add(now, domain, rule.Label(), key, r.Remaining, r.Reset)
}

// Call, Store, CacheHit and FailureAnswer implement rls.Observer: the
// page counts decisions only.
func (a *Activity) Call(string, string, time.Duration)         {}
func (a *Activity) Store(string, string, time.Duration, error) {}
func (a *Activity) CacheHit()                                  {}
func (a *Activity) FailureAnswer(rls.FailureMode)              {}

// Hitters is the summary of the refused buckets.
func (a *Activity) Hitters() *Hitters { return a.hitters }

// seriesOf returns the series of a rule of domain: read without a lock
// once the rule was met.
func (a *Activity) seriesOf(domain string, rule *descriptors.Rule) *series {
	if s, ok := a.rules.Load(rule); ok {
		return s.(*series)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := seriesKey{domain, rule.Label()}
	s := a.series[k]
	switch {
	case s != nil:
	case len(a.series) < MaxSeries:
		s = &series{}
		a.series[k] = s
	default:
		s = &a.discard
	}
	if a.nrules >= maxRules {
		a.rules.Clear()
		a.nrules = 0
	}
	a.rules.Store(rule, s)
	a.nrules++
	return s
}

// Counts returns the allowed and refused decisions of a limit (domain and
// label) per second, oldest first, for the n seconds ending with end
// (included; at most RingSeconds). A limit not met has zeros.
func (a *Activity) Counts(domain, label string, end int64, n int) (allowed, refused []int64) {
	n = min(max(n, 0), RingSeconds)
	allowed, refused = make([]int64, n), make([]int64, n)
	a.mu.Lock()
	s := a.series[seriesKey{domain, label}]
	a.mu.Unlock()
	if s == nil {
		return allowed, refused
	}
	for i := range n {
		sec := end - int64(n-1-i)
		allowed[i] = s.allowed[slotOf(sec)].at(sec)
		refused[i] = s.refused[slotOf(sec)].at(sec)
	}
	return allowed, refused
}

// series is one limit's ring of per-second counts.
type series struct {
	allowed, refused [RingSeconds]counter
}

func slotOf(sec int64) int {
	i := sec % RingSeconds
	if i < 0 {
		i += RingSeconds
	}
	return int(i)
}

// counter is the count of one second of the ring, and which second: the
// second's low stampBits bits above the count's countBits. A counter of
// another second is that second's, and reads as 0 for this one.
type counter struct{ v atomic.Uint64 }

const (
	countBits = 36
	stampMask = 1<<(64-countBits) - 1
)

func stampOf(sec int64) uint64 { return uint64(sec) & stampMask }

// add counts one decision of second sec.
func (c *counter) add(sec int64) {
	stamp := stampOf(sec)
	for {
		old := c.v.Load()
		if old>>countBits == stamp {
			c.v.Add(1)
			return
		}
		if c.v.CompareAndSwap(old, stamp<<countBits|1) {
			return
		}
	}
}

// at returns the count of second sec: 0 if the counter holds another.
func (c *counter) at(sec int64) int64 {
	v := c.v.Load()
	if v>>countBits != stampOf(sec) {
		return 0
	}
	return int64(v & (1<<countBits - 1))
}
