package region

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// memBoard is a Board in process, with the Redis board's rules: a report
// per field, gone past its TTL. It fails while down is set.
type memBoard struct {
	mu      sync.Mutex
	reports map[string]posted
	down    bool
}

type posted struct {
	report string
	until  time.Time
}

func newMemBoard() *memBoard { return &memBoard{reports: map[string]posted{}} }

func (b *memBoard) ExchangeReport(_ context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return nil, errors.New("the board is down")
	}
	b.reports[field] = posted{string(report), now.Add(ttl)}
	var out []Posted
	for f, p := range b.reports {
		if now.After(p.until) {
			delete(b.reports, f)
		} else if f != field {
			out = append(out, Posted{Field: f, Report: p.report})
		}
	}
	return out, nil
}

// regionUnderTest is one region's replica: its exchange, its store under
// its claims, and what it was asked of one bucket a second.
type regionUnderTest struct {
	x        *Exchange
	st       *Store
	rate     float64
	owed     float64
	admitted int
}

// TestExchangeDividesALimit: two regions, each a replica on a memory
// store of its own and a board of its own, each writing its reports to
// the other's board too, on one limit of 60 a second, asked 60 and 20 a
// second: within a few exchanges they admit 40 and 20, 60 together, as a
// max-min fair division has it. Then the first region's board fails:
// the second goes on with the claims in force, the first keeps its own.
func TestExchangeDividesALimit(t *testing.T) {
	boards := map[string]*memBoard{"eu": newMemBoard(), "us": newMemBoard()}
	var clock time.Time = time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	var rs []*regionUnderTest
	for _, name := range []string{"eu", "us"} {
		peers := map[string]Board{}
		for other, b := range boards {
			if other != name {
				peers[other] = b
			}
		}
		x, err := New(Options{Region: name, Regions: []string{"eu", "us"}, Own: boards[name], Peers: peers,
			Interval: time.Second, Silence: 30 * time.Second, Clock: now})
		if err != nil {
			t.Fatal(err)
		}
		st, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rs = append(rs, &regionUnderTest{x: x, st: x.Wrap(st)})
	}
	rs[0].rate, rs[1].rate = 60, 20
	ctx := context.Background()
	res := make([]limit.Result, 1)
	run := func(d time.Duration) {
		for end := clock.Add(d); clock.Before(end); clock = clock.Add(10 * time.Millisecond) {
			iv := time.Second
			if clock.Truncate(iv).Equal(clock) {
				epoch := clock.UnixNano() / int64(iv)
				for _, r := range rs {
					r.x.Publish(ctx, epoch-1, clock)
				}
			}
			if clock.Add(-iv / 2).Truncate(iv).Equal(clock.Add(-iv / 2)) {
				for _, r := range rs {
					r.x.Divide(ctx, clock.UnixNano()/int64(iv), clock)
				}
			}
			for _, r := range rs {
				for r.owed += r.rate * 0.01; r.owed >= 1; r.owed-- {
					req := []limit.Bucket{{Key: "api|user=u", Limit: l, Hits: 1}}
					r.x.Asked(req)
					if err := r.st.Apply(ctx, clock, req, res); err != nil {
						t.Fatal(err)
					}
					if res[0].Admitted {
						r.admitted++
					}
				}
			}
		}
	}
	measure := func(d time.Duration) []float64 {
		before := []int{rs[0].admitted, rs[1].admitted}
		run(d)
		return []float64{float64(rs[0].admitted-before[0]) / d.Seconds(), float64(rs[1].admitted-before[1]) / d.Seconds()}
	}
	run(5 * time.Second)
	got := measure(10 * time.Second)
	t.Logf("eu %.1f/s, us %.1f/s", got[0], got[1])
	if math.Abs(got[0]-40) > 2 || math.Abs(got[1]-20) > 2 {
		t.Fatalf("eu %.1f/s and us %.1f/s, want 40 and 20", got[0], got[1])
	}
	if last := rs[1].x.LastExchange("eu"); clock.Sub(last) > time.Second {
		t.Fatalf("us last exchanged with eu's store at %v, more than an interval before %v", last, clock)
	}

	// eu's store down: us cannot write there, eu cannot read or write its
	// own; each keeps deciding under what it holds.
	boards["eu"].down = true
	got = measure(10 * time.Second)
	t.Logf("eu's store down: eu %.1f/s, us %.1f/s", got[0], got[1])
	if got[0]+got[1] > 60*1.02 || got[0] < 36 || got[1] < 18 {
		t.Fatalf("eu's store down: eu %.1f/s and us %.1f/s, want about 40 and 20 as before", got[0], got[1])
	}
}

// TestRegionalBucketsAreNotDivided: a bucket kept to its region (scope:
// region) is decided under its whole limit and not counted for the
// exchange; another, before any report, under an equal part.
func TestRegionalBucketsAreNotDivided(t *testing.T) {
	x, err := New(Options{Region: "eu", Regions: []string{"eu", "us", "ap"}, Own: newMemBoard(), Interval: time.Second, Silence: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	st := x.Wrap(inner)
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	now := time.Unix(1_800_000_000, 0)
	admitted := func(b limit.Bucket) int {
		n := 0
		res := make([]limit.Result, 1)
		for range 100 {
			x.Asked([]limit.Bucket{b})
			if err := st.Apply(context.Background(), now, []limit.Bucket{b}, res); err != nil {
				t.Fatal(err)
			}
			if res[0].Admitted {
				n++
			}
		}
		return n
	}
	if n := admitted(limit.Bucket{Key: "api|mine=x", Limit: l, Hits: 1, Regional: true}); n != 60 {
		t.Errorf("a regional bucket admitted %d at once, want its whole 60", n)
	}
	if n := admitted(limit.Bucket{Key: "api|shared=x", Limit: l, Hits: 1}); n != 20 {
		t.Errorf("a divided bucket admitted %d at once before any report, want an equal part, 20", n)
	}
	rep := x.report(1, now)
	if _, ok := rep.Buckets[KeyHash("api|mine=x")]; ok || len(rep.Buckets) != 1 {
		t.Errorf("the report names %d buckets, the regional one among them: %v", len(rep.Buckets), rep.Buckets)
	}
}
