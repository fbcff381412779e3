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

// These tests run regions on one machine: each its own Redis (or
// Cluster) and a replica of the binary at its default flags but for the
// region settings (and the mode a test names), each region reaching the
// others' Redis through links of 50 ms each way (internal/netdelay),
// which a test may cut.

// linkDelay is the one-way delay between two regions.
const linkDelay = 50 * time.Millisecond

// regionMode is how each region keeps its buckets: a single Redis or a
// Cluster, exact or local-first (flags).
type regionMode struct {
	name    string
	cluster bool
	flags   []string
	// replicas is each region's replicas; 0 is one.
	replicas int
}

// regionModes are the modes the steady and shifting tests run in. A
// Cluster's clients follow its nodes' own addresses (CLUSTER SLOTS), past
// any proxy in front of its seeds: its peers reach it directly, without
// the links' delay, which the single-Redis modes test.
var regionModes = []regionMode{
	{name: "exact"},
	{name: "local-first", flags: []string{"-sync-interval", "100ms"}},
	{name: "Cluster", cluster: true},
	{name: "Cluster local-first", cluster: true, flags: []string{"-sync-interval", "100ms"}},
}

// regionSet is regions, each a Redis and a replica, and the links from
// each to each other's Redis.
type regionSet struct {
	names []string
	// replicas are the regions' replicas, region by region, as names;
	// regionOf[k] is replica k's region.
	replicas []*quotaReplica
	regionOf []int
	// servers are each region's Redis (single Redis modes).
	servers []*redistest.Server
	// links[i][j] carries region i's exchanges to region j's Redis; nil
	// for i == j, and between Clusters.
	links [][]*netdelay.Link
}

// startRegions starts a Redis (or Cluster), the links and a replica for
// each of names, in mode.
func startRegions(t *testing.T, names []string, mode regionMode) *regionSet {
	t.Helper()
	rs := &regionSet{names: names}
	urls := make([]string, len(names))
	addrs := make([]string, len(names)) // a single Redis's, for the links
	for i := range names {
		if mode.cluster {
			urls[i] = redistest.StartCluster(t).URL()
			continue
		}
		srv := redistest.Start(t)
		urls[i], addrs[i] = srv.URL(), srv.Addr()
		rs.servers = append(rs.servers, srv)
	}
	for i := range names {
		row := make([]*netdelay.Link, len(names))
		for j := range names {
			if i != j && !mode.cluster {
				row[j] = netdelay.Start(t, addrs[j], linkDelay)
			}
		}
		rs.links = append(rs.links, row)
	}
	for i, name := range names {
		var peers []string
		for j, other := range names {
			switch {
			case j == i:
			case mode.cluster:
				peers = append(peers, other+"="+urls[j])
			default:
				peers = append(peers, other+"="+(&url.URL{Scheme: "redis", Host: rs.links[i][j].Addr(), Path: "/0"}).String())
			}
		}
		args := append([]string{"-store", "redis", "-redis-url", urls[i], "-region", name, "-region-peers", strings.Join(peers, ",")}, mode.flags...)
		if mode.cluster {
			args = append(args, "-redis-cluster")
		}
		for k := range max(mode.replicas, 1) {
			label := name
			if mode.replicas > 1 {
				label = fmt.Sprintf("%s-%d", name, k)
			}
			rs.replicas = append(rs.replicas, startQuotaReplica(t, label, args, ""))
			rs.regionOf = append(rs.regionOf, i)
		}
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
// their callers offering 60, 30 and 10 a second, in every mode. Together
// they are allowed within 10% of the limit, each at least 80% of its
// max-min fair share (25, 25, 10); without the exchange they were
// allowed 100 a second. No call waits for another region: with links of
// 50 ms each way, one that crossed would take 100 ms. Then demand moves
// from eu to ap (eu's callers offer 10, ap's 60): ap reaches 80% of its
// new fair share (25) within 5 s, and the shares are fair again.
func TestRegionsShareALimit(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	for _, mode := range regionModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			shareALimit(t, mode)
		})
	}
}

func shareALimit(t *testing.T, mode regionMode) {
	rs := startRegions(t, []string{"eu", "us", "ap"}, mode)
	offers, fair := []float64{60, 30, 10}, []float64{25, 25, 10}
	callers, parts := startRegionCallers(t, rs, offers)
	time.Sleep(5 * time.Second)
	marks := markCalls(callers)
	rates := measure(10*time.Second, parts...)
	if !checkFairOf(t, 60, parts, rates, fair) {
		for _, r := range rs.replicas {
			t.Logf("region %s: %s", r.name, r.regionCounts())
		}
	}
	checkNoCallWaits(t, rs.names, callers, marks, !mode.cluster)
	if mode.name == "exact" {
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

	// Demand moves from eu to ap.
	callers[0].setRate(10)
	callers[2].setRate(60)
	var seconds []float64
	reached := 0
	for k := 1; k <= 8; k++ {
		r := measure(time.Second, parts[2])[0]
		seconds = append(seconds, r)
		if reached == 0 && r >= 0.8*25 {
			reached = k
		}
	}
	t.Logf("after the shift, ap's callers allowed a second: %.0f", seconds)
	if reached == 0 || reached > 5 {
		t.Errorf("ap's callers did not reach 80%% of their new fair share (25/s) within 5 s: %.0f a second", seconds)
	}
	rates = measure(8*time.Second, parts...)
	if !checkFairOf(t, 60, parts, rates, []float64{10, 25, 25}) {
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

// startRegionCallers starts a caller on each region's replica of the
// shared bucket, offering offers a second, and returns them, also as
// counters named after their region.
func startRegionCallers(t *testing.T, rs *regionSet, offers []float64) ([]*rlsCaller, []allowedCounter) {
	t.Helper()
	var callers []*rlsCaller
	var parts []allowedCounter
	for i, r := range rs.replicas {
		c := startRLSCallerOn(t, r, offers[i], "api", "shared")
		callers = append(callers, c)
		parts = append(parts, namedCounter{fmt.Sprintf("region %s's callers", rs.names[i]), c})
	}
	return callers, parts
}

// markCalls marks where each caller's calls start from now.
func markCalls(callers []*rlsCaller) []int {
	marks := make([]int, len(callers))
	for i, c := range callers {
		marks[i] = c.took.mark()
	}
	return marks
}

// checkNoCallWaits logs the calls' latency in each region since marks
// and, with delayed links, fails if the 99th percentile reached the
// links' round trip: what a call that waited on another region would
// take at the least.
func checkNoCallWaits(t *testing.T, names []string, callers []*rlsCaller, marks []int, delayed bool) {
	t.Helper()
	for i, c := range callers {
		p99, longest, n := c.took.since(marks[i])
		t.Logf("region %s: %d calls, p99 %v, longest %v", names[i], n, p99.Round(time.Microsecond), longest.Round(time.Microsecond))
		if delayed && p99 >= 2*linkDelay {
			t.Errorf("region %s: p99 %v, at least the links' round trip (%v): calls wait on another region", names[i], p99, 2*linkDelay)
		}
	}
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
// In exact and local-first modes (a Cluster's peers are not behind links
// a test can cut).
func TestRegionsThroughACut(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	for _, mode := range regionModes {
		if mode.cluster {
			continue
		}
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			throughACut(t, mode)
		})
	}
}

func throughACut(t *testing.T, mode regionMode) {
	rs := startRegions(t, []string{"eu", "us", "ap"}, mode)
	offers := []float64{60, 30, 10}
	callers, parts := startRegionCallers(t, rs, offers)
	time.Sleep(6 * time.Second)
	rs.cut(0, true)
	callers[1].setRate(60)
	time.Sleep(2 * time.Second)
	marks := markCalls(callers)
	during := measure(12*time.Second, parts...)
	checkNoCallWaits(t, rs.names, callers, marks, true)
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

// TestRegionsOneWayCut: eu's reports stop reaching us's Redis while us's
// still reach eu's (one link of the two cut), and meanwhile eu's callers
// go from 10 to 60 a second. us no longer hears eu and leaves it the
// claim it held; eu, hearing everyone, must not take more: a write that
// fails counts its peer late, as the peer counts it. Together the regions
// stay within the limit and eu within what it held (without this it took
// 20.6, 65.4 together), no call failing or waiting; after the heal the
// shares are fair again (20 each).
func TestRegionsOneWayCut(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us", "ap"}, regionModes[0])
	callers, parts := startRegionCallers(t, rs, []float64{10, 30, 30})
	time.Sleep(6 * time.Second)
	rs.links[0][1].Cut()
	time.Sleep(2 * time.Second)
	callers[0].setRate(60)
	time.Sleep(2 * time.Second)
	marks := markCalls(callers)
	during := measure(10*time.Second, parts...)
	total := during[0] + during[1] + during[2]
	t.Logf("eu's reports cut from us: %.1f, %.1f and %.1f/s, %.1f together", during[0], during[1], during[2], total)
	if total > 60*1.1 {
		t.Errorf("with eu's reports cut from us the regions were allowed %.1f/s together, over the limit of 60 and 10%%", total)
	}
	if during[0] > 10*1.2 {
		t.Errorf("with its reports cut from us, eu was allowed %.1f/s, more than the 10 it held: us leaves it only that", during[0])
	}
	checkNoCallWaits(t, rs.names, callers, marks, true)
	rs.links[0][1].Heal()
	time.Sleep(5 * time.Second)
	after := measure(8*time.Second, parts...)
	checkFairOf(t, 60, parts, after, []float64{20, 20, 20})
	for i, c := range callers {
		if n := c.errors.Load(); n > 0 {
			t.Errorf("%d calls of region %s's callers failed", n, rs.names[i])
		}
	}
}

// TestRegionsStoreDown: the same three regions, us's Redis stopped for
// 15 s. us's calls are answered by its failure mode (the default:
// unavailable); eu and ap go on as before, none of their calls failing
// or waiting, us's part of the limit kept for it until -region-silence
// (5 s here) and then given back to them; us's Redis back (empty), the
// shares are fair again within 5 s.
func TestRegionsStoreDown(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us", "ap"}, regionMode{name: "exact", flags: []string{"-region-silence", "5s"}})
	offers := []float64{60, 30, 10}
	callers, parts := startRegionCallers(t, rs, offers)
	time.Sleep(6 * time.Second)
	rs.servers[1].Stop()
	stopped := time.Now()
	usFailed := callers[1].errors.Load()
	marks := markCalls(callers)
	time.Sleep(time.Second)
	held := measure(3*time.Second, parts[0], parts[2])
	t.Logf("us's Redis down, before the silence: eu %.1f/s, ap %.1f/s", held[0], held[1])
	if held[0] < 0.8*25 || held[0] > 25*1.1+1 || held[1] < 0.8*10 {
		t.Errorf("before the silence, eu and ap were allowed %.1f and %.1f/s: want their parts, 25 and 10", held[0], held[1])
	}
	time.Sleep(time.Until(stopped.Add(9 * time.Second)))
	given := measure(5*time.Second, parts[0], parts[2])
	t.Logf("after the silence: eu %.1f/s, ap %.1f/s", given[0], given[1])
	if given[0] < 0.8*50 || given[1] < 0.8*10 || given[0]+given[1] > 60*1.1 {
		t.Errorf("after the silence, eu and ap were allowed %.1f and %.1f/s: want us's part given back, 50 and 10 of 60", given[0], given[1])
	}
	if n := callers[1].errors.Load() - usFailed; n == 0 {
		t.Errorf("us's Redis down, none of us's calls failed: its failure mode is unavailable")
	}
	checkNoCallWaits(t, []string{"eu", "ap"}, []*rlsCaller{callers[0], callers[2]}, []int{marks[0], marks[2]}, true)
	for _, i := range []int{0, 2} {
		if n := callers[i].errors.Load(); n > 0 {
			t.Errorf("%d calls of region %s's callers failed", n, rs.names[i])
		}
	}
	rs.servers[1].Restart()
	time.Sleep(5 * time.Second)
	after := measure(8*time.Second, parts...)
	if !checkFairOf(t, 60, parts, after, []float64{25, 25, 10}) {
		for _, r := range rs.replicas {
			t.Logf("region %s: %s", r.name, r.regionCounts())
		}
	}
}

// TestRegionsReplicas: two regions of two replicas each, on one limit of
// 60 a second: eu's callers offer 30 a second on each replica, us's 10.
// Each replica counts its own calls and works the claims out from its
// own reads of its region's Redis, the region's bucket taking both: eu
// is allowed 40 (20 on each replica) and us 20 (10 each), 60 together.
func TestRegionsReplicas(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us"}, regionMode{name: "exact", replicas: 2})
	offers := []float64{30, 10}
	var callers []*rlsCaller
	var parts []allowedCounter
	for k, r := range rs.replicas {
		c := startRLSCallerOn(t, r, offers[rs.regionOf[k]], "api", "shared")
		callers = append(callers, c)
		parts = append(parts, namedCounter{fmt.Sprintf("replica %s's callers", r.name), c})
	}
	time.Sleep(6 * time.Second)
	rates := measure(10*time.Second, parts...)
	if !checkFairOf(t, 60, parts, rates, []float64{20, 20, 10, 10}) {
		for _, r := range rs.replicas {
			t.Logf("replica %s: %s", r.name, r.regionCounts())
		}
	}
	for _, r := range rs.replicas {
		var b rls.Buckets
		out, err := r.get("/buckets?domain=edge&descriptor=api=shared")
		if err == nil {
			err = json.Unmarshal([]byte(out), &b)
		}
		if err != nil {
			t.Fatalf("replica %s: GET /buckets: %v", r.name, err)
		}
		for _, s := range b.Regions {
			if s.Replicas != 2 {
				t.Errorf("replica %s: region %s shown with %d replicas, want 2", r.name, s.Region, s.Replicas)
			}
		}
	}
	for k, c := range callers {
		if n := c.errors.Load(); n > 0 {
			t.Errorf("%d calls of replica %s's callers failed", n, rs.replicas[k].name)
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
	rs := startRegions(t, []string{"eu", "us"}, regionModes[0])
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
