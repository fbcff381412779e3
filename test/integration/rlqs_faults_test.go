package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rlqsclient"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// These tests hold RLQS to its limit through faults: a replica killed, the
// store hung or down, a stream that stops reading. The Envoys are emulated
// as an Envoy cluster of the replicas moves them: each stream goes to the
// first replica that answers, in an order of its own, and a stream that
// ends is opened again at the Envoy's next report, on the next replica
// that answers.

// faultWindow is the span over which the Envoys together must stay within
// faultSlack of the limit, through any fault.
const (
	faultWindow = 5 * time.Second
	faultSlack  = 0.10
)

// dialCluster connects as an Envoy cluster of addrs does: its streams go
// to the first of addrs that accepts a connection (pick_first), and once
// that one is gone, to the next that does.
func dialCluster(t *testing.T, addrs []string) *grpc.ClientConn {
	t.Helper()
	r := manual.NewBuilderWithScheme("cluster")
	var state resolver.State
	for _, a := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(state)
	conn, err := grpc.NewClient(r.Scheme()+":///replicas", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()), reconnectWithinASecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// fleet is Envoys spread over replicas, each wanting the same rate of one
// bucket, with a record of what they were allowed together, sampled.
type fleet struct {
	envoys   []*rlqsEnvoy
	replicas []*quotaReplica
	limit    float64

	mu      sync.Mutex
	samples []fleetSample
	stop    chan struct{}
	done    chan struct{}
}

// fleetSample is what the fleet was allowed in all, at a time, and how
// many of its Envoys held no assignment from a replica then.
type fleetSample struct {
	at         time.Time
	allowed    int64
	unassigned int
}

// startFleet starts n Envoys, Envoy i first on replica i % len(replicas)
// and then on the others in turn, each wanting want requests a second of
// bucket, whose limit is limit. They start a report interval apart in
// all, as a fleet's Envoys are never in step: Envoys in step, each given
// the same token bucket, are allowed their requests all at once, and
// what a window counts swings with how many of those moments it holds.
func startFleet(t *testing.T, replicas []*quotaReplica, n int, want, limit float64, bucket map[string]string) *fleet {
	t.Helper()
	f := &fleet{replicas: replicas, limit: limit, stop: make(chan struct{}), done: make(chan struct{})}
	for i := range n {
		time.Sleep(rlqsInterval / time.Duration(n))
		var addrs []string
		for j := range replicas {
			addrs = append(addrs, replicas[(i+j)%len(replicas)].grpcAddr)
		}
		e := &rlqsEnvoy{name: fmt.Sprintf("Envoy %d (first on %s)", i, replicas[i%len(replicas)].name), want: want, bucket: bucket}
		e.inst = rlqsclient.Start(context.Background(), dialCluster(t, addrs), rlqsclient.Options{Domain: "edge", ReportInterval: rlqsInterval})
		e.start(want, func() bool { return e.inst.Request(bucket) })
		f.envoys = append(f.envoys, e)
	}
	go f.sample(bucket)
	t.Cleanup(func() {
		f.halt()
		for _, e := range f.envoys {
			e.halt()
			e.inst.Close()
		}
	})
	return f
}

// sample records the fleet every 100 ms until halted.
func (f *fleet) sample(bucket map[string]string) {
	defer close(f.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		s := fleetSample{at: time.Now()}
		for _, e := range f.envoys {
			s.allowed += e.allowedSoFar()
			if a, ok := e.inst.Assignment(bucket); !ok || a.Source != rlqsclient.FromServer {
				s.unassigned++
			}
		}
		f.mu.Lock()
		f.samples = append(f.samples, s)
		f.mu.Unlock()
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
	}
}

func (f *fleet) halt() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}

// between returns the samples from start to end.
func (f *fleet) between(start, end time.Time) []fleetSample {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fleetSample
	for _, s := range f.samples {
		if !s.at.Before(start) && !s.at.After(end) {
			out = append(out, s)
		}
	}
	return out
}

// rate is what the fleet was allowed a second from start to end.
func (f *fleet) rate(start, end time.Time) float64 {
	ss := f.between(start, end)
	if len(ss) < 2 {
		return math.NaN()
	}
	first, last := ss[0], ss[len(ss)-1]
	return float64(last.allowed-first.allowed) / last.at.Sub(first.at).Seconds()
}

// worstWindow is the most the fleet was allowed a second over any window
// of faultWindow from start to end, and when that window began.
func (f *fleet) worstWindow(start, end time.Time) (float64, time.Time) {
	ss := f.between(start, end)
	worst, at := 0.0, time.Time{}
	j := 0
	for i := range ss {
		for j < len(ss) && ss[j].at.Sub(ss[i].at) < faultWindow {
			j++
		}
		if j == len(ss) {
			break
		}
		if r := float64(ss[j].allowed-ss[i].allowed) / ss[j].at.Sub(ss[i].at).Seconds(); r > worst {
			worst, at = r, ss[i].at
		}
	}
	return worst, at
}

// timeline is the fleet's rate each second from start to end, for a
// failure's message, with the Envoys not assigned by a replica.
func (f *fleet) timeline(start, end time.Time) string {
	var sb strings.Builder
	for at := start; at.Before(end); at = at.Add(time.Second) {
		ss := f.between(at, at.Add(time.Second))
		if len(ss) < 2 {
			continue
		}
		unassigned := 0
		for _, s := range ss {
			unassigned = max(unassigned, s.unassigned)
		}
		fmt.Fprintf(&sb, "\n  %5.1fs: %5.1f/s, %d unassigned", at.Sub(start).Seconds(), f.rate(at, at.Add(time.Second)), unassigned)
	}
	return sb.String()
}

// unassigned is the most Envoys without an assignment from a replica at
// any sample from start to end.
func (f *fleet) unassigned(start, end time.Time) int {
	most := 0
	for _, s := range f.between(start, end) {
		most = max(most, s.unassigned)
	}
	return most
}

// checkWithinLimit fails t if over any window from start to end the fleet
// was allowed more than the limit and its slack.
func (f *fleet) checkWithinLimit(t *testing.T, start, end time.Time, origin time.Time) {
	t.Helper()
	worst, at := f.worstWindow(start, end)
	t.Logf("the most over any %s: %.1f/s (from %.1fs) of a limit of %v/s", faultWindow, worst, at.Sub(origin).Seconds(), f.limit)
	if worst > (1+faultSlack)*f.limit {
		t.Errorf("the Envoys together were allowed %.1f/s over %s from %.1fs, above %v/s (the limit and %.0f%%)",
			worst, faultWindow, at.Sub(origin).Seconds(), (1+faultSlack)*f.limit, 100*faultSlack)
	}
}

// checkNear fails t unless the fleet was allowed within the slack of the
// limit over the window from start.
func (f *fleet) checkNear(t *testing.T, what string, start time.Time) {
	t.Helper()
	got := f.rate(start, start.Add(faultWindow))
	t.Logf("%s: %.1f/s of a limit of %v/s", what, got, f.limit)
	if math.Abs(got-f.limit) > faultSlack*f.limit {
		t.Errorf("%s: the Envoys together were allowed %.1f/s, not within %.0f%% of the limit of %v/s", what, got, 100*faultSlack, f.limit)
	}
}

// storeFault is a fault of the store under two replicas: store starts
// the store and returns the replicas' flags for it, begin makes the fault
// and end ends it, returning once the store answers again.
type storeFault struct {
	name  string
	long  time.Duration // how long the fault lasts, at least
	store func(t *testing.T) (flags []string, begin, end func())
}

var storeFaults = []storeFault{
	// Redis stops answering, its connections open (SIGSTOP): every call
	// waits out its deadline until the breaker opens.
	{"RedisHung", 30 * time.Second, func(t *testing.T) ([]string, func(), func()) {
		srv := redistest.Start(t)
		return []string{"-store", "redis", "-redis-url", srv.URL()}, srv.Pause, srv.Resume
	}},
	// Redis is down (connections refused), and comes back empty: the
	// replicas' records are gone with it.
	{"RedisDown", 10 * time.Second, func(t *testing.T) ([]string, func(), func()) {
		srv := redistest.Start(t)
		return []string{"-store", "redis", "-redis-url", srv.URL()}, srv.Stop, srv.Restart
	}},
	// The Cluster master of the limit's slot is killed; its replica is
	// promoted after the node timeout (5 s).
	{"ClusterMasterKilled", 0, func(t *testing.T) ([]string, func(), func()) {
		c := redistest.StartCluster(t)
		return []string{"-store", "redis", "-redis-url", c.URL(), "-redis-cluster"},
			func() { masterOf(t, c, "{edge|api=shared}").Stop() },
			func() {
				waitUntil(t, 30*time.Second, "a replica promoted", func() bool { return len(c.Masters(t)) == 3 })
			}
	}},
}

// masterOf returns the Cluster's master serving key.
func masterOf(t *testing.T, c *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{c.Nodes[0].Addr()}})
	defer client.Close()
	n, err := client.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Nodes {
		if s.Addr() == n.Options().Addr {
			return s
		}
	}
	t.Fatalf("no node of the Cluster at %s", n.Options().Addr)
	return nil
}

// TestRLQSStoreFaults: two replicas of one store at their default flags,
// 20 Envoys each offering 10/s of one limit of 60/s. The store fails:
// Redis stops answering for 30 s, or is down for 10 s, or the Cluster
// master of the limit loses its place to its replica. The replicas keep
// answering every stream from the last division they know, so no Envoy's
// assignment expires to its own fallback (allow all), no 5 s window is
// allowed more than 110% of the limit, and 5 s after the store answers the
// Envoys are within 10% of it. (Before, the replicas sent nothing once
// the store failed, the assignments expired and the Envoys were allowed
// 200/s, 3.3 times the limit, until it answered.)
func TestRLQSStoreFaults(t *testing.T) {
	skipShort(t)
	for _, fault := range storeFaults {
		t.Run(fault.name, func(t *testing.T) {
			t.Parallel()
			store, begin, end := fault.store(t)
			replicas := []*quotaReplica{startQuotaReplica(t, "A", store, ""), startQuotaReplica(t, "B", store, "")}
			f := startFleet(t, replicas, 20, 10, 60, rlqsShared)
			origin := time.Now()
			time.Sleep(rlqsWarmUp + 2*time.Second)
			steady := time.Now()

			begin()
			began := time.Now()
			time.Sleep(fault.long)
			end()
			back := time.Now()
			time.Sleep(2 * faultWindow)
			last := time.Now()

			t.Logf("the store failed from %.1fs to %.1fs; per second:%s", began.Sub(origin).Seconds(), back.Sub(origin).Seconds(), f.timeline(origin, last))
			f.checkWithinLimit(t, steady, last, origin)
			f.checkNear(t, "before the fault", steady.Add(-faultWindow))
			f.checkNear(t, "from 5 s after the store answers", back.Add(faultWindow))
			if n := f.unassigned(steady, last); n > 0 {
				t.Errorf("%d Envoys at once held no assignment from a replica", n)
			}
			if t.Failed() {
				explainFleet(t, f)
			}
		})
	}
}

// explainFleet logs what each replica holds of the fleet's bucket and
// what a few Envoys hold, for a failure.
func explainFleet(t *testing.T, f *fleet) {
	t.Helper()
	for _, e := range f.envoys[:min(4, len(f.envoys))] {
		t.Log(e.describe())
	}
	for _, r := range f.replicas {
		t.Logf("replica %s: %s", r.name, r.counts())
	}
}

// levelReplicas is how many replicas r counts on the shared limit's level
// (itself included), from GET /buckets; 0 if it cannot tell.
func (r *quotaReplica) levelReplicas() int {
	out, err := r.get("/buckets?domain=edge&bucket=api=shared")
	if err != nil {
		return 0
	}
	var v struct {
		Subscribers struct {
			Levels []struct {
				Replicas int `json:"replicas"`
			} `json:"levels"`
		} `json:"subscribers"`
	}
	if json.Unmarshal([]byte(out), &v) != nil || len(v.Subscribers.Levels) == 0 {
		return 0
	}
	return v.Subscribers.Levels[0].Replicas
}

// TestRLQSReplicaKilled: three replicas of one Redis (single or Cluster)
// at their default flags, 30 Envoys each offering 10/s of a limit of 60/s. One replica is
// killed (SIGKILL: it closes nothing); its Envoys' streams end and reopen
// on the other two at their next report. Across the event no 5 s window
// is allowed more than 110% of the limit, no Envoy is left without an
// assignment from a replica, the dead replica's demand stops counting
// within its records' TTL (three report intervals) and a refresh, and 5 s
// after that the Envoys are within 10% of the limit again.
func TestRLQSReplicaKilled(t *testing.T) {
	skipShort(t)
	for _, b := range []rlqsBackend{rlqsSingle, rlqsCluster} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testReplicaKilled(t, b.args(t))
		})
	}
}

func testReplicaKilled(t *testing.T, store []string) {
	replicas := []*quotaReplica{startQuotaReplica(t, "A", store, ""), startQuotaReplica(t, "B", store, ""), startQuotaReplica(t, "C", store, "")}
	f := startFleet(t, replicas, 30, 10, 60, rlqsShared)
	origin := time.Now()
	time.Sleep(rlqsWarmUp + 2*time.Second)
	steady := time.Now()
	for _, r := range replicas {
		if n := r.levelReplicas(); n != 3 {
			t.Fatalf("replica %s counts %d replicas on the level before the kill, want 3", r.name, n)
		}
	}

	victim, survivors := replicas[2], replicas[:2]
	victim.cmd.Process.Kill()
	victim.cmd.Wait()
	killed := time.Now()
	// Its records live three report intervals from its last exchange, and
	// the survivors read the level again a refresh after their last
	// exchange, at their next report.
	gone := 3*rlqsInterval + rlqs.DefaultRefresh + rlqsInterval
	waitUntil(t, gone+time.Second, "the dead replica's demand no longer counted", func() bool {
		for _, r := range survivors {
			if r.levelReplicas() != 2 {
				return false
			}
		}
		return true
	})
	forgotten := time.Now()
	time.Sleep(faultWindow + faultWindow)
	last := time.Now()

	t.Logf("replica C killed at %.1fs, no longer counted %s after; per second:%s", killed.Sub(origin).Seconds(),
		forgotten.Sub(killed).Round(10*time.Millisecond), f.timeline(origin, last))
	if took := forgotten.Sub(killed); took > gone {
		t.Errorf("the dead replica's demand counted %s after the kill, past its records' TTL, a refresh and a report (%s)", took, gone)
	}
	f.checkWithinLimit(t, steady, last, origin)
	f.checkNear(t, "before the kill", steady.Add(-faultWindow))
	f.checkNear(t, "from 5 s after the dead replica stopped counting", forgotten.Add(faultWindow))
	if n := f.unassigned(steady, last); n > 0 {
		t.Errorf("%d Envoys at once held no assignment from a replica", n)
	}
	for _, e := range f.envoys {
		if s := e.inst.Stats(); s.StreamsOpened < 1 {
			t.Errorf("%s opened no stream", e.name)
		}
	}
	if t.Failed() {
		explainFleet(t, f)
	}
}

// bigReporter opens a stream on its own connection to addr that sends
// reports of buckets buckets of its own (named after name), as fast as
// the service reads them. If read, it reads their answers and stops after
// reports of them, closing its stream; if not, it never reads an answer
// and sends until its stream or connection fails. It returns how many
// reports it sent once it stops.
func bigReporter(t *testing.T, addr string, name string, buckets, reports int, read bool) <-chan int {
	t.Helper()
	conn := dial(t, addr)
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
	for i := range buckets {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"user": fmt.Sprintf("%s-user-%06d", name, i)}},
			NumRequestsAllowed: 1, TimeElapsed: durationpb.New(time.Second)})
	}
	sent := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		n := 0
		defer func() { sent <- n }()
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			return
		}
		for (!read || n < reports) && stream.Send(m) == nil {
			n++
			if read {
				if _, err := stream.Recv(); err != nil {
					return
				}
			}
		}
		stream.CloseSend()
		stream.Recv() // the end
	}()
	return sent
}

// heapAfterGC is the replica's heap in use after a collection, in bytes
// (it needs -pprof).
func (r *quotaReplica) heapAfterGC(t *testing.T) float64 {
	t.Helper()
	if _, err := r.get("/debug/pprof/heap?gc=1"); err != nil {
		t.Fatal(err)
	}
	return scrape(t, r.httpAddr, "go_memstats_heap_alloc_bytes")
}

// TestRLQSSlowReaders: 20 clients, each on its own connection, send
// reports of 2,000 buckets and never read an answer. Once gRPC's windows
// are full, the service's answers to them wait, and what they hold stops
// growing; after the streams' TTL (3 s) each is ended with its
// connection, and what it held is given back: the heap is then what it
// was after the same clients had reported the same buckets, read their
// answers and left. An Envoy on the same replica meanwhile is answered at
// every report.
func TestRLQSSlowReaders(t *testing.T) {
	skipShort(t)
	const slow, buckets = 20, 2000
	r := startQuotaReplica(t, "A", nil, "", "-pprof")
	e := startEnvoy(t, "Envoy", r, 50)
	time.Sleep(rlqsWarmUp)
	// settled is the heap once the buckets the clients reported have gone
	// idle, and the store and the registry have swept them.
	settled := func() float64 {
		last := r.heapAfterGC(t)
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
			time.Sleep(time.Second)
			h := r.heapAfterGC(t)
			if math.Abs(h-last) < 256<<10 {
				return h
			}
			last = h
		}
		return last
	}
	sendAll := func(read bool) (sent int) {
		var done []<-chan int
		for i := range slow {
			done = append(done, bigReporter(t, r.grpcAddr, fmt.Sprintf("c%d", i), buckets, 3, read))
		}
		for _, d := range done {
			select {
			case n := <-d:
				sent += n
			case <-time.After(30 * time.Second):
				t.Fatal("a client's stream did not end")
			}
		}
		return sent
	}
	// The same clients, reading their answers: what their buckets leave.
	sendAll(true)
	waitUntil(t, 10*time.Second, "the clients' streams closed", func() bool { return scrape(t, r.httpAddr, "envoy_rls_rlqs_streams") == 1 })
	base := settled()
	before := e.inst.Stats().ResponsesReceived

	sent := make(chan int, 1)
	go func() { sent <- sendAll(false) }()
	// Stuck: no more reports of theirs read.
	reported := func() float64 { return scrape(t, r.httpAddr, "envoy_rls_rlqs_reported_buckets_total") }
	for last := -1.0; ; {
		time.Sleep(300 * time.Millisecond)
		n := reported()
		if n-last < buckets {
			break
		}
		last = n
	}
	stuck := time.Now()
	held := r.heapAfterGC(t)
	time.Sleep(time.Second)
	later := r.heapAfterGC(t)
	waitUntil(t, 10*time.Second, "the slow streams ended", func() bool { return scrape(t, r.httpAddr, "envoy_rls_rlqs_streams") == 1 })
	ended := time.Since(stuck)
	var n int
	select {
	case n = <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow clients' streams did not fail once the service ended them: their connections were left open, the answers queued on them")
	}
	after := settled()
	t.Logf("%d slow streams: %d reports of %d buckets sent in all; stuck, the heap held %.1f MiB more than after the same clients had read their answers and left (%.0f KiB a stream: its %d buckets' state and its answers), a second later %+.2f MiB; ended %s after; then %+.2f MiB",
		slow, n, buckets, (held-base)/(1<<20), (held-base)/slow/1024, buckets, (later-held)/(1<<20), ended.Round(10*time.Millisecond), (after-base)/(1<<20))
	if n := scrape(t, r.httpAddr, "envoy_rls_rlqs_stalled_streams_total"); n != slow {
		t.Errorf("%v streams counted stalled, want %d", n, slow)
	}
	if ended > 3*time.Second+2*time.Second {
		t.Errorf("the slow streams ended %s after their answers were stuck, want about their TTL, 3 s", ended)
	}
	if later-held > 1<<20 {
		t.Errorf("the heap grew %.1f MiB in a second while the slow streams were stuck, want it bounded", (later-held)/(1<<20))
	}
	if after-base > 2<<20 {
		t.Errorf("the heap holds %.1f MiB more once the slow streams ended than once the same clients had left reading their answers, want what they held given back", (after-base)/(1<<20))
	}
	got := e.inst.Stats().ResponsesReceived - before
	if want := int(time.Since(stuck)/rlqsInterval) - 1; got < want {
		t.Errorf("the Envoy got %d answers meanwhile, want one a report interval (%d)", got, want)
	}
	if a, ok := e.inst.Assignment(rlqsAlice); !ok || a.Source != rlqsclient.FromServer {
		t.Errorf("the Envoy's assignment: %+v, want one from the service", a)
	}
	checkNoMisreads(t, e)
}
