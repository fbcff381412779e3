package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/netdelay"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// These tests run regions on one machine: each its own Redis and a
// replica of the binary at its default flags but for the region settings,
// each region reaching the others' Redis through links of 50 ms each way
// (internal/netdelay), which a test may cut.

// linkDelay is the one-way delay between two regions.
const linkDelay = 50 * time.Millisecond

// regionSet is regions, each a Redis and a replica, and the links from
// each to each other's Redis.
type regionSet struct {
	names    []string
	redis    []*redistest.Server
	replicas []*quotaReplica
	// links[i][j] carries region i's exchanges to region j's Redis.
	links [][]*netdelay.Link
}

// startRegions starts a Redis, the links and a replica for each of names,
// the replicas with more flags after the region settings.
func startRegions(t *testing.T, names []string, more ...string) *regionSet {
	t.Helper()
	rs := &regionSet{names: names}
	for range names {
		rs.redis = append(rs.redis, redistest.Start(t))
	}
	for i := range names {
		var row []*netdelay.Link
		for j := range names {
			var l *netdelay.Link
			if i != j {
				l = netdelay.Start(t, rs.redis[j].Addr(), linkDelay)
			}
			row = append(row, l)
		}
		rs.links = append(rs.links, row)
	}
	for i, name := range names {
		var peers []string
		for j, other := range names {
			if j != i {
				peers = append(peers, other+"="+(&url.URL{Scheme: "redis", Host: rs.links[i][j].Addr(), Path: "/0"}).String())
			}
		}
		args := append([]string{"-store", "redis", "-redis-url", rs.redis[i].URL(), "-region", name, "-region-peers", strings.Join(peers, ",")}, more...)
		rs.replicas = append(rs.replicas, startQuotaReplica(t, name, args, ""))
	}
	return rs
}

// cut cuts, or heals, the links of region i both ways.
func (rs *regionSet) cut(i int, cut bool) {
	for j := range rs.names {
		for _, l := range []*netdelay.Link{rs.links[i][j], rs.links[j][i]} {
			switch {
			case l == nil:
			case cut:
				l.Cut()
			default:
				l.Heal()
			}
		}
	}
}

// TestRegionsShareALimit: three regions on one limit of 60 a second,
// their callers offering 60, 30 and 10 a second. Together they are
// allowed within 10% of the limit, each at least 80% of its max-min fair
// share (25, 25, 10); without the exchange they were allowed 100 a
// second.
func TestRegionsShareALimit(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us", "ap"})
	offers, fair := []float64{60, 30, 10}, []float64{25, 25, 10}
	var parts []allowedCounter
	for i, r := range rs.replicas {
		c := startRLSCallerOn(t, r, offers[i], "api", "shared")
		parts = append(parts, namedCounter{fmt.Sprintf("region %s's callers", rs.names[i]), c})
	}
	time.Sleep(5 * time.Second)
	rates := measure(10*time.Second, parts...)
	if !checkFairOf(t, 60, parts, rates, fair) {
		for _, r := range rs.replicas {
			t.Logf("region %s: %s", r.name, r.regionCounts())
		}
	}
	for _, r := range rs.replicas {
		checkRegionViews(t, r, rs.names, offers, "fresh")
	}
	t.Run("page", func(t *testing.T) {
		tb := openTab(t, newBrowser(t), "http://"+rs.replicas[0].adminAddr+"/")
		tb.waitFor(10*time.Second, "the three regions, fresh",
			`[...document.querySelectorAll("#regions tbody tr")].filter((tr) => tr.innerText.includes("fresh")).length === 3 && !document.getElementById("regions").hidden`)
		if !strings.Contains(tb.text(), "eu (this region)") {
			t.Errorf("the page does not name eu as its own region:\n%s", tb.text())
		}
		if errs := tb.consoleErrors(); len(errs) > 0 {
			t.Errorf("the console: %v", errs)
		}
	})
}

// checkRegionViews checks what replica r shows of the regions (names)
// and of the shared bucket, its callers offering offers a second in
// each: every region in state, exchanged with lately (fresh: within two
// intervals, none failed; else some failed), each region's demand about
// its offer (fresh only) and claims within the limit.
func checkRegionViews(t *testing.T, r *quotaReplica, names []string, offers []float64, state string) {
	t.Helper()
	out, err := r.get("/buckets?domain=edge&descriptor=api=shared")
	if err != nil {
		t.Fatal(err)
	}
	var b rls.Buckets
	if err := json.Unmarshal([]byte(out), &b); err != nil || len(b.Descriptors) != 1 || len(b.Descriptors[0].Buckets) != 1 {
		t.Fatalf("region %s: GET /buckets: %v\n%s", r.name, err, out)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("region %s: "+format+"\nGET /buckets:\n%s", append(append([]any{r.name}, args...), out)...)
	}
	if len(b.Regions) != len(names) {
		fail("%d regions shown, want %d", len(b.Regions), len(names))
		return
	}
	for _, s := range b.Regions {
		want := state
		if s.Region == r.name {
			want = "fresh" // its own reports always count
		}
		switch {
		case s.State != want:
			fail("region %s is %s, want %s", s.Region, s.State, want)
		case want == "fresh" && (s.LastExchangeSeconds < 0 || s.LastExchangeSeconds > 2 || s.FailedExchanges > 0):
			fail("region %s exchanged with %.1f s ago, %d exchanges failed: want within 2 s, none failed", s.Region, s.LastExchangeSeconds, s.FailedExchanges)
		case want != "fresh" && s.FailedExchanges == 0:
			fail("region %s is %s, and no exchange with its store failed", s.Region, s.State)
		}
	}
	v := b.Descriptors[0].Buckets[0].Regions
	if v == nil || !v.Divided || len(v.Parts) != len(names) || v.Region != r.name {
		fail("the bucket's regions: %+v, want divided among %d regions", v, len(names))
		return
	}
	size, rate := 0.0, 0.0
	for i, p := range v.Parts {
		size, rate = size+p.Size, rate+p.Rate
		offer := offers[slices.Index(names, p.Region)]
		if p.State == "fresh" && (p.Demand < 0.75*offer || p.Demand > 1.25*offer) {
			fail("part %d: region %s was asked %.1f/s, its callers offer %.0f", i, p.Region, p.Demand, offer)
		}
		if p.Region == r.name && (p.Size != v.Size || p.Rate != v.Rate) {
			fail("its own part %+v is not the claim it decides under (%v, %v/s)", p, v.Size, v.Rate)
		}
	}
	if size > 60+1e-6 || rate > 60+1e-6 {
		fail("the parts add up to %.2f and %.2f/s, past the limit of 60 and 60/s", size, rate)
	}
}

// namedCounter names an allowedCounter.
type namedCounter struct {
	name string
	allowedCounter
}

func (n namedCounter) label() string { return n.name }

// regionCounts is what the replica's metrics say of the regions.
func (r *quotaReplica) regionCounts() string { return r.metricsOf("envoy_rls_region_") }

// TestRegionsThroughACut: the same three regions; region eu's links to
// the others are cut for 15 s (nothing crosses, nothing fails at once),
// and meanwhile us's callers offer 60 a second instead of 30. Each region
// goes on deciding on its own store: no call fails or waits for the link,
// eu keeps its part, us and ap divide the rest, and together they stay
// within the limit; 5 s after the links heal the shares are fair again.
func TestRegionsThroughACut(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us", "ap"})
	offers := []float64{60, 30, 10}
	var callers []*rlsCaller
	var parts []allowedCounter
	for i, r := range rs.replicas {
		c := startRLSCallerOn(t, r, offers[i], "api", "shared")
		callers = append(callers, c)
		parts = append(parts, namedCounter{fmt.Sprintf("region %s's callers", rs.names[i]), c})
	}
	time.Sleep(6 * time.Second)
	rs.cut(0, true)
	callers[1].setRate(60)
	time.Sleep(2 * time.Second)
	during := measure(12*time.Second, parts...)
	total := during[0] + during[1] + during[2]
	t.Logf("during the cut: %.1f, %.1f and %.1f/s, %.1f together", during[0], during[1], during[2], total)
	if total > 60*1.1 {
		t.Errorf("during the cut the regions were allowed %.1f/s together, over the limit of 60 and 10%%", total)
	}
	if during[0] < 0.8*25 {
		t.Errorf("during the cut eu was allowed %.1f/s, below 80%% of the 25 it held", during[0])
	}
	checkRegionViews(t, rs.replicas[0], rs.names, []float64{60, 60, 10}, "late")
	rs.cut(0, false)
	time.Sleep(5 * time.Second)
	after := measure(10*time.Second, parts...)
	if !checkFairOf(t, 60, parts, after, []float64{25, 25, 10}) {
		for _, r := range rs.replicas {
			t.Logf("region %s: %s", r.name, r.regionCounts())
		}
	}
	for i, c := range callers {
		if n := c.errors.Load(); n > 0 {
			t.Errorf("%d calls of region %s's callers failed", n, rs.names[i])
		}
	}
}

// TestRegionsRLQS: two regions, two Envoys in each reporting one limit of
// 60 a second over RLQS, offering 40 each in eu and 5 each in us: each
// region's Envoys divide its part of the limit, so together they are
// allowed the limit (each region on its own would give its Envoys all of
// it: 90), and what they ask, allowed or denied, is their region's
// demand, so eu's get what us's leave: 25, 25, 5 and 5 (by usage alone,
// regions that ask nothing per call hold equal parts: eu's 15 each).
func TestRegionsRLQS(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us"})
	var envoys []*rlqsEnvoy
	var parts []allowedCounter
	offers := []float64{40, 5} // each Envoy's, in eu and us
	for i, r := range rs.replicas {
		for j := range 2 {
			e := startEnvoyOn(t, fmt.Sprintf("Envoy %d in %s", j, rs.names[i]), r, offers[i], rlqsShared)
			envoys, parts = append(envoys, e), append(parts, e)
		}
	}
	time.Sleep(rlqsWarmUp + 2*time.Second)
	rates := measure(rlqsSpan, parts...)
	if !checkFairOf(t, 60, parts, rates, []float64{25, 25, 5, 5}) {
		explain(t, rs.replicas, envoys)
		for _, r := range rs.replicas {
			out, _ := r.get("/buckets?domain=edge&descriptor=api=shared")
			t.Logf("region %s: GET /buckets:\n%s", r.name, out)
		}
	}
	checkNoMisreads(t, envoys...)
}
