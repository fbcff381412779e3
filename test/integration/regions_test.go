package integration

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/netdelay"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
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
// 60 a second over RLQS, each offering 30: each region's Envoys divide
// its part of the limit, so together they are allowed the limit (each
// region on its own would give its Envoys all of it: 120).
func TestRegionsRLQS(t *testing.T) {
	skipShort(t)
	t.Parallel() // regions of their own: beside the other region tests
	rs := startRegions(t, []string{"eu", "us"})
	var envoys []*rlqsEnvoy
	var parts []allowedCounter
	for i, r := range rs.replicas {
		for j := range 2 {
			e := startEnvoyOn(t, fmt.Sprintf("Envoy %d in %s", j, rs.names[i]), r, 30, rlqsShared)
			envoys, parts = append(envoys, e), append(parts, e)
		}
	}
	time.Sleep(rlqsWarmUp + 2*time.Second)
	rates := measure(rlqsSpan, parts...)
	if !checkFairOf(t, 60, parts, rates, []float64{15, 15, 15, 15}) {
		explain(t, rs.replicas, envoys)
	}
	checkNoMisreads(t, envoys...)
}
