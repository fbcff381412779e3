package metrics

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

func TestCallsAndDecisions(t *testing.T) {
	m := New(0.8)
	m.Call("", "OK", 0)
	m.Call("api", "OVER_LIMIT", 0)
	m.Call("api", "OVER_LIMIT", 0)
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(
		"domain: api\ndescriptors:\n  - key: user\n    name: trades\n    leaky_bucket: {size: 10, drip_rate: 1s}\n")})
	if err != nil {
		t.Fatal(err)
	}
	levels := cfg.Domain("api").Resolve([]descriptors.Entry{{Key: "user", Value: "a"}}, nil, nil)
	if len(levels) != 1 {
		t.Fatalf("levels: %v", levels)
	}
	rule := levels[0].Rule
	m.Limit("api", rule, "api|user=a", 1, &limit.Result{Admitted: true, Remaining: 2}, false) // 8 of 10 used: not past 0.8
	m.Limit("api", rule, "api|user=a", 1, &limit.Result{Admitted: true, Remaining: 1}, false) // 9 of 10: near
	m.Limit("api", rule, "api|user=a", 1, &limit.Result{}, false)
	m.Limit("api", rule, "api|user=a", 1, &limit.Result{}, true)
	m.WatchBuckets(func() int { return 7 }, func() int64 { return 700 }, func() uint64 { return 3 })

	want := `
# HELP envoy_rls_calls_total ShouldRateLimit calls, by domain ("(unknown)" for domains not in the config) and outcome: OK, OVER_LIMIT or a gRPC error code.
# TYPE envoy_rls_calls_total counter
envoy_rls_calls_total{code="OK",domain="(unknown)"} 1
envoy_rls_calls_total{code="OVER_LIMIT",domain="api"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "envoy_rls_calls_total"); err != nil {
		t.Error(err)
	}
	for series, n := range map[string]float64{
		"admitted": 2, "near_limit": 1, "over_limit": 1, "shadow_would_block": 1,
	} {
		if got := testutil.ToFloat64(m.decisions.with("api", "trades", series)); got != n {
			t.Errorf("decision %s: %v, want %v", series, got, n)
		}
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "envoy_rls_memory_buckets", "envoy_rls_memory_bytes", "envoy_rls_memory_evictions_total"); err != nil || n != 3 {
		t.Errorf("memory store series: %d (%v), want 3", n, err)
	}
}

// TestLatencyAndBuildInfo: the call histogram counts by code, the store
// histogram by store and operation, and build_info carries the versions.
func TestLatencyAndBuildInfo(t *testing.T) {
	m := New(0)
	m.Call("api", "OK", 30*time.Microsecond)
	m.Call("", "OK", 3*time.Millisecond)
	m.Call("api", "OVER_LIMIT", 40*time.Microsecond)
	m.Call("api", "Unavailable", 30*time.Millisecond)
	m.Store("redis", "apply", 700*time.Microsecond, nil)
	m.Store("redis", "apply", 2*time.Millisecond, errors.New("down"))
	m.Store("redis", "peek", 400*time.Microsecond, nil)
	m.Store("memory", "apply", 2*time.Microsecond, nil)
	m.BuildInfo("v1.2.3 0123456789ab")
	m.BuildInfo("v1.2.3 0123456789ab") // twice: no panic, one series

	counts := map[string]uint64{}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			series := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case s.GetHistogram() != nil:
				counts[series] = s.GetHistogram().GetSampleCount()
				if series == `envoy_rls_call_duration_seconds{code=OK}` {
					// 30µs falls in the 50µs bucket, 3ms in the 5ms one.
					for _, b := range s.GetHistogram().GetBucket() {
						if b.GetUpperBound() == .00005 && b.GetCumulativeCount() != 1 || b.GetUpperBound() == .005 && b.GetCumulativeCount() != 2 {
							t.Errorf("OK calls: bucket le=%g holds %d", b.GetUpperBound(), b.GetCumulativeCount())
						}
					}
				}
			case f.GetName() == "envoy_rls_build_info":
				counts[series] = uint64(s.GetGauge().GetValue())
			}
		}
	}
	want := map[string]uint64{
		"envoy_rls_call_duration_seconds{code=OK}":                                              2,
		"envoy_rls_call_duration_seconds{code=OVER_LIMIT}":                                      1,
		"envoy_rls_call_duration_seconds{code=Unavailable}":                                     1,
		"envoy_rls_store_duration_seconds{operation=apply,store=redis}":                         2,
		"envoy_rls_store_duration_seconds{operation=peek,store=redis}":                          1,
		"envoy_rls_store_duration_seconds{operation=apply,store=memory}":                        1,
		"envoy_rls_build_info{goversion=" + runtime.Version() + ",version=v1.2.3 0123456789ab}": 1,
	}
	for series, n := range want {
		if counts[series] != n {
			t.Errorf("%s: %d, want %d", series, counts[series], n)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("series: %v, want exactly %v", counts, want)
	}
	if got := testutil.ToFloat64(m.storeErrors); got != 1 {
		t.Errorf("store errors: %v, want 1", got)
	}
}

// BenchmarkObserve is what the metrics add to each call on the memory
// store: a call and a store call observed, from parallel goroutines.
func BenchmarkObserve(b *testing.B) {
	m := New(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Store("memory", "apply", 900*time.Nanosecond, nil)
			m.Call("api", "OK", 2500*time.Nanosecond)
		}
	})
}

// TestLatencyConcurrent: observations from several goroutines, scraped
// meanwhile, all add up in the end.
func TestLatencyConcurrent(t *testing.T) {
	m := New(0)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				m.Call("api", "OK", time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := m.Registry().Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "envoy_rls_call_duration_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 4000 || math.Abs(h.GetSampleSum()-4) > 1e-9 {
			t.Fatalf("count %d, sum %g: want 4000 and 4 s", h.GetSampleCount(), h.GetSampleSum())
		}
		return
	}
	t.Fatal("no envoy_rls_call_duration_seconds")
}

// TestChargedPastLimit: hits of a limit that charges always that did not
// fit are counted, per limit; admitted hits and other limits are not.
func TestChargedPastLimit(t *testing.T) {
	m := New(0.8)
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "tok.yaml", Data: []byte(
		"domain: tok\ncharge: always\ndescriptors:\n  - key: user\n    name: tokens\n    fixed_window: {limit: 1000, window: 1m}\n  - key: plain\n    charge: admitted\n    fixed_window: {limit: 1, window: 1m}\n")})
	if err != nil {
		t.Fatal(err)
	}
	rules := cfg.Domain("tok").Rules()
	m.Limit("tok", rules[0], "tok|user=a", 600, &limit.Result{Admitted: true, Remaining: 400}, false)
	m.Limit("tok", rules[0], "tok|user=a", 600, &limit.Result{}, false) // recorded past the budget
	m.Limit("tok", rules[0], "tok|user=a", 0, &limit.Result{}, false)   // a check: nothing charged
	m.Limit("tok", rules[1], "tok|plain=a", 5, &limit.Result{}, false)  // refused, not charged
	want := `
# HELP envoy_rls_charged_past_limit_hits_total Hits of charges that did not fit a limit that charges always (charge: always), recorded all the same, per limit: usage already spent, which the limit reports as a debt until it has leaked, slid or reset away.
# TYPE envoy_rls_charged_past_limit_hits_total counter
envoy_rls_charged_past_limit_hits_total{domain="tok",limit="tokens"} 600
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "envoy_rls_charged_past_limit_hits_total"); err != nil {
		t.Error(err)
	}
}
