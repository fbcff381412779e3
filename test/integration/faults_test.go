package integration

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// The fault tests run a load over three replicas (faultload_test.go),
// make a fault on real Redis processes in its middle, and check what
// docs/reliability.md states: every call answered before its deadline,
// by a decision or by the failure mode; the share decided while the fault
// lasts; how soon every call is decided again; and that the replicas
// admit exactly a limit afterwards.

// onBreaker is the breaker as the binary sets it by default.
var onBreaker = redis.Breaker{Trip: breaker.DefaultTrip, Cool: breaker.DefaultCool}

// decidedAgain checks that every call was decided again within within of
// healed, and returns how long it took.
func decidedAgain(t *testing.T, l *faultLoad, healed, within time.Duration) time.Duration {
	t.Helper()
	back, ok := l.backAt(healed)
	if !ok {
		t.Fatalf("calls were still not all decided at the end of the load, %s after the fault healed", l.since()-healed)
	}
	took := max(back-healed, 0)
	if took > within {
		t.Errorf("every call decided again %s after the fault healed, want within %s", took, within)
	}
	return took
}

// fault is a fault made in the middle of a load (underFault), and when
// it began and healed, as times of the load.
type fault struct {
	load          *faultLoad
	began, healed time.Duration
}

// underFault runs a load of pairs on rs for 2 s, then begin, which makes
// the fault, and heal, which waits for its end or ends it; the load runs
// on for after, then stops and is reported, the fault's start and end
// named by what.
func underFault(t *testing.T, rs []*replica, pairs func(c, i int) []string, what [2]string, begin, heal func(), after time.Duration) fault {
	t.Helper()
	l := startLoad(t, rs, pairs)
	time.Sleep(2 * time.Second)
	f := fault{load: l, began: l.since()}
	begin()
	heal()
	f.healed = l.since()
	time.Sleep(after)
	l.stopLoad()
	l.report(t, map[time.Duration]string{f.began: what[0], f.healed: what[1]})
	return f
}

// during sums the load's slices wholly within the fault.
func (f fault) during() tally {
	return f.load.between(f.began.Truncate(faultSlice)+faultSlice, f.healed.Truncate(faultSlice))
}

// halfDecided fails the test unless at least half the calls within f were
// decided (one master of three down or hung), and returns them.
func halfDecided(t *testing.T, f fault, what string) tally {
	t.Helper()
	d := f.during()
	t.Logf("while %s (%s): %s", what, (f.healed - f.began).Round(time.Millisecond), d)
	if d.okShare() < 0.5 {
		t.Errorf("%.0f%% of calls decided while %s, want at least half", 100*d.okShare(), what)
	}
	return d
}

// allDecided fails the test unless every call within f was decided, in
// the slices the machine did not starve (the load's probe woke late: no
// deadline can be kept then, whatever the service does).
func allDecided(t *testing.T, f fault, what string) {
	t.Helper()
	all, d, starved := f.load.judged(f.began.Truncate(faultSlice)+faultSlice, f.healed.Truncate(faultSlice))
	t.Logf("while %s (%s): %s", what, (f.healed - f.began).Round(time.Millisecond), all)
	if starved > 0 {
		t.Logf("%d slices not judged, the machine lagging past %s; the rest: %s", starved, starvedLag, d)
	}
	if d.calls == 0 || d.ok != d.calls {
		t.Errorf("%d of %d calls not decided while %s, want none", d.calls-d.ok, d.calls, what)
	}
}

// TestClusterMasterKilled kills one of a Cluster's three masters under
// load (cluster-require-full-coverage no, cluster-node-timeout 1000):
// until its replica is promoted, calls for its slots are answered
// Unavailable in time and the other masters' keys are decided; then every
// call is decided again.
func TestClusterMasterKilled(t *testing.T) {
	c := redistest.StartCluster(t, "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
	rs := faultReplicas(t, 3, redis.ClientOptions{URL: c.URL(), Cluster: true}, onBreaker)
	f := underFault(t, rs, oneLevel, [2]string{"master killed", "replica promoted"},
		func() { c.Masters(t)[0].Stop() },
		func() {
			waitUntil(t, 20*time.Second, "a replica promoted", func() bool { return len(c.Masters(t)) == 3 })
		},
		4*time.Second)
	halfDecided(t, f, "one master of three was down")
	took := decidedAgain(t, f.load, f.healed, 3*time.Second)
	t.Logf("every call decided again %s after the promotion, %s after the kill", took, took+f.healed-f.began)
	admitsExactly(t, rs, "cluster-killed")
}

// TestClusterMasterHung stops one of a Cluster's masters (SIGSTOP) for 3
// seconds under load, shorter than the node timeout (5 s): no failover,
// calls for its slots are answered Unavailable in time and the others are
// decided; once it resumes, every call is decided again. Without the
// breaker, each call for the hung master waits out the store timeout;
// with it, once the first calls timed out, the rest are answered at once.
func TestClusterMasterHung(t *testing.T) {
	c := redistest.StartCluster(t)
	var waited [2]time.Duration
	for i, b := range []redis.Breaker{{}, onBreaker} {
		name := "without a breaker"
		if b.Trip > 0 {
			name = "with the breaker"
		}
		t.Run(name, func(t *testing.T) {
			rs := faultReplicas(t, 3, redis.ClientOptions{URL: c.URL(), Cluster: true}, b)
			victim := c.Masters(t)[0]
			f := underFault(t, rs, oneLevel, [2]string{"master hung", "master resumed"},
				func() { victim.Pause(); time.Sleep(3 * time.Second) }, victim.Resume, 3*time.Second)
			waited[i] = halfDecided(t, f, "one master of three was hung").failedMean()
			took := decidedAgain(t, f.load, f.healed, 2*time.Second)
			t.Logf("every call decided again %s after the master resumed", took)
			admitsExactly(t, rs, "cluster-hung-"+strings.ReplaceAll(name, " ", "-"))
		})
	}
	t.Logf("the hung master's calls were answered Unavailable in %s on average without a breaker, in %s with it", waited[0], waited[1])
	if waited[1]*3 > waited[0] {
		t.Errorf("the breaker did not cut the wait of the hung master's calls to a third")
	}
}

// TestClusterSlowNodeNotCutOff makes one master slow but alive, blocked
// 20 ms at a time (DEBUG SLEEP) half the time for 3 seconds, under load
// with the breaker: its calls wait, well within their deadline, and none
// is answered by the failure mode.
func TestClusterSlowNodeNotCutOff(t *testing.T) {
	c := redistest.StartCluster(t, "--enable-debug-command", "yes")
	rs := faultReplicas(t, 3, redis.ClientOptions{URL: c.URL(), Cluster: true}, onBreaker)
	slow := c.Masters(t)[0].Client(t)
	f := underFault(t, rs, oneLevel, [2]string{"one master slow", "fast again"}, func() {
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			if err := slow.Do(context.Background(), "DEBUG", "SLEEP", "0.02").Err(); err != nil {
				t.Errorf("DEBUG SLEEP: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}, func() {}, time.Second)
	allDecided(t, f, "one master was slow but alive")
}

// TestSentinelFailover kills the master a Sentinel watches
// (down-after-milliseconds 1000) under load: until the Sentinel promotes
// the replica, calls are answered Unavailable in time; then every call is
// decided again, on the new master.
func TestSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", portOf(master.Addr()))
	waitUntil(t, 10*time.Second, "the replica in sync", func() bool {
		info, err := master.Client(t).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	sentinel := redistest.StartSentinel(t, master, "faults")
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: sentinel})
	defer sc.Close()
	waitUntil(t, 15*time.Second, "the Sentinel knowing the replica", func() bool {
		rs, err := sc.Replicas(context.Background(), "faults").Result()
		return err == nil && len(rs) == 1
	})
	rs := faultReplicas(t, 3, redis.ClientOptions{URL: "redis://localhost/0", SentinelMaster: "faults", SentinelAddrs: []string{sentinel}}, onBreaker)
	rc := replica.Client(t)
	f := underFault(t, rs, oneLevel, [2]string{"master killed", "replica promoted"}, master.Stop, func() {
		waitUntil(t, 20*time.Second, "the replica promoted", func() bool {
			role, err := rc.Do(context.Background(), "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master"
		})
	}, 4*time.Second)
	t.Logf("from the kill to the promotion (%s): %s", (f.healed - f.began).Round(time.Millisecond), f.during())
	took := decidedAgain(t, f.load, f.healed, 3*time.Second)
	t.Logf("every call decided again %s after the promotion, %s after the kill", took, took+f.healed-f.began)
	admitsExactly(t, rs, "sentinel")
}

// portOf returns the port of a host:port address.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestClusterReshard moves 2000 slots between masters under two-level
// load (both levels' keys in one slot, decided by one script call): every
// call is decided throughout, the moved keys' buckets with them.
func TestClusterReshard(t *testing.T) {
	c := redistest.StartCluster(t)
	rs := faultReplicas(t, 3, redis.ClientOptions{URL: c.URL(), Cluster: true}, onBreaker)
	masters := c.Masters(t)
	f := underFault(t, rs, twoLevels, [2]string{"resharding", "resharded"},
		func() { c.Reshard(t, masters[0], masters[1], 2000) }, func() {}, time.Second)
	allDecided(t, f, "2000 slots moved")
	admitsExactly(t, rs, "resharded")
}

// TestRedisRestartedEmpty kills a Redis without persistence under load
// and starts it again, empty: calls are answered Unavailable in time while
// it is down and decided again soon after; its buckets are gone, so a
// bucket that was full admits its whole limit again (what
// docs/reliability.md says a restart loses).
func TestRedisRestartedEmpty(t *testing.T) {
	srv := redistest.New(t)
	srv.Restart()
	rs := faultReplicas(t, 3, redis.ClientOptions{URL: srv.URL()}, onBreaker)
	admitsExactly(t, rs, "before-restart")
	f := underFault(t, rs, oneLevel, [2]string{"Redis killed", "Redis restarted empty"},
		func() { srv.Stop(); time.Sleep(2 * time.Second) }, srv.Restart, 3*time.Second)
	down := f.during()
	if down.ok+down.over > 0 {
		t.Errorf("%d calls decided while Redis was down", down.ok+down.over)
	}
	took := decidedAgain(t, f.load, f.healed, 2*time.Second)
	t.Logf("while Redis was down: %s; every call decided again %s after it restarted", down, took)
	admitsExactly(t, rs, "before-restart") // full before, empty now
}
