package ui

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// testConfig is a domain of two limits: user (leaky) and user/action=trade
// (named trades).
const testConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 60}
    descriptors:
      - key: action
        value: trade
        rate_limit: {unit: second, requests_per_unit: 1, name: trades}
`

func loadConfig(t testing.TB) *descriptors.Config {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(testConfig)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// levels resolves user=u[,action=a] in cfg's domain api.
func levels(t testing.TB, cfg *descriptors.Config, entries ...descriptors.Entry) []descriptors.Level {
	t.Helper()
	ls := cfg.Domain("api").Resolve(entries, nil, nil)
	if len(ls) == 0 {
		t.Fatalf("%v resolves to no level", entries)
	}
	return ls
}

var (
	admitted = &limit.Result{Admitted: true, Remaining: 5}
	refused  = &limit.Result{Remaining: 0, Reset: 1500 * time.Millisecond}
)

func TestCountsSteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	cfg := loadConfig(t)
	l := levels(t, cfg, descriptors.Entry{Key: "user", Value: "alice"})[0]
	a := NewActivity(nil, 8)
	steps := []struct {
		at      time.Duration
		result  *limit.Result
		shadow  bool
		end     time.Duration
		allowed []int64
		refused []int64
	}{
		{0, admitted, false, 0, []int64{0, 0, 1}, []int64{0, 0, 0}},
		{500 * time.Millisecond, refused, false, 0, []int64{0, 0, 1}, []int64{0, 0, 1}},
		{time.Second, admitted, false, time.Second, []int64{0, 1, 1}, []int64{0, 1, 0}},
		{time.Second, refused, true, time.Second, []int64{0, 1, 2}, []int64{0, 1, 0}}, // shadow: let through
		{3 * time.Second, refused, false, 3 * time.Second, []int64{2, 0, 0}, []int64{0, 0, 1}},
		// 300 s on, the slot of t0 holds its new second: t0 reads 0.
		{300 * time.Second, admitted, false, 300 * time.Second, []int64{0, 0, 1}, []int64{0, 0, 0}},
		{301 * time.Second, admitted, false, 301 * time.Second, []int64{0, 1, 1}, []int64{0, 0, 0}},
	}
	for i, s := range steps {
		a.LimitAt(t0.Add(s.at), "api", l.Rule, l.Key, s.result, s.shadow)
		allowed, refused := a.Counts("api", "user", t0.Add(s.end).Unix(), 3)
		if !slices.Equal(allowed, s.allowed) || !slices.Equal(refused, s.refused) {
			t.Errorf("step %d: allowed %v refused %v, want %v %v", i, allowed, refused, s.allowed, s.refused)
		}
	}
	if all, _ := a.Counts("api", "user", t0.Unix(), RingSeconds+10); len(all) != RingSeconds {
		t.Errorf("Counts of more than RingSeconds: %d seconds", len(all))
	}
	if all, ref := a.Counts("api", "nothing", t0.Unix(), 2); !slices.Equal(all, []int64{0, 0}) || !slices.Equal(ref, []int64{0, 0}) {
		t.Errorf("a limit never met: %v %v", all, ref)
	}
}

// TestCountsFollowReload: a reloaded config's rules count on the series
// of their label.
func TestCountsFollowReload(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	a := NewActivity(nil, 8)
	for range 3 {
		l := levels(t, loadConfig(t), descriptors.Entry{Key: "user", Value: "alice"})[0]
		a.LimitAt(t0, "api", l.Rule, l.Key, admitted, false)
	}
	if all, _ := a.Counts("api", "user", t0.Unix(), 1); all[0] != 3 {
		t.Errorf("three configs' decisions: %d", all[0])
	}
}

func TestSeriesBounded(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	a := NewActivity(nil, 8)
	for i := range MaxSeries + 10 {
		r := &descriptors.Rule{Path: "p" + string(rune('a'+i%26)) + time.Duration(i).String()}
		a.LimitAt(t0, "api", r, "k", admitted, false)
	}
	if len(a.series) != MaxSeries {
		t.Errorf("%d series, want at most %d", len(a.series), MaxSeries)
	}
}

func TestActivityConcurrent(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	cfg := loadConfig(t)
	ls := levels(t, cfg, descriptors.Entry{Key: "user", Value: "alice"}, descriptors.Entry{Key: "action", Value: "trade"})
	a := NewActivity(nil, 8)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				at := t0.Add(time.Duration(i%3) * time.Second)
				for _, l := range ls {
					r := admitted
					if (w+i)%2 == 0 {
						r = refused
					}
					a.LimitAt(at, "api", l.Rule, l.Key, r, false)
				}
				if i%100 == 0 {
					a.Counts("api", "user", t0.Unix()+2, 3)
					a.Hitters().Top(at, 5)
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, label := range []string{"user", "trades"} {
		all, ref := a.Counts("api", label, t0.Unix()+2, 3)
		for i := range all {
			total += all[i] + ref[i]
		}
	}
	if total != 2*workers*each {
		t.Errorf("counted %d decisions, want %d", total, 2*workers*each)
	}
	var refusals int64
	for _, h := range a.Hitters().Top(t0.Add(2*time.Second), 10) {
		refusals += h.Refused
	}
	if refusals != workers*each {
		t.Errorf("the summary counts %d refusals, want %d", refusals, workers*each)
	}
}

// BenchmarkActivityLimit is the page's cost on a decision's path.
func BenchmarkActivityLimit(b *testing.B) {
	cfg := loadConfig(b)
	for _, bc := range []struct {
		name   string
		result *limit.Result
	}{{"admitted", admitted}, {"refused", refused}} {
		b.Run(bc.name, func(b *testing.B) {
			ls := levels(b, cfg, descriptors.Entry{Key: "user", Value: "alice"})
			a := NewActivity(nil, DefaultCapacity)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go a.Run(ctx)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a.Limit("api", ls[0].Rule, ls[0].Key, 1, bc.result, false)
				}
			})
		})
	}
}

// TestRunClock: while Run runs, admitted decisions count in the second of
// its clock; after, in the second read at the decision.
func TestRunClock(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	now := t0
	a := NewActivity(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }, 8)
	l := levels(t, loadConfig(t), descriptors.Entry{Key: "user", Value: "alice"})[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	for a.clock.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	a.Limit("api", l.Rule, l.Key, 1, admitted, false)
	a.Limit("api", l.Rule, l.Key, 1, refused, false)
	cancel()
	<-done
	mu.Lock()
	now = t0.Add(time.Second)
	mu.Unlock()
	a.Limit("api", l.Rule, l.Key, 1, admitted, false)
	allowed, refusals := a.Counts("api", "user", t0.Unix()+1, 2)
	if !slices.Equal(allowed, []int64{1, 1}) || !slices.Equal(refusals, []int64{1, 0}) {
		t.Errorf("allowed %v refused %v, want [1 1] [1 0]", allowed, refusals)
	}
}
