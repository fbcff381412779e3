package rlqs

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// memStore is the memory store, which can be made to fail.
type memStore struct {
	*memory.Store
	fail  atomic.Bool
	delay atomic.Int64 // nanoseconds each call takes, bounded by its context
	// inflight counts the calls under way, most the most at once.
	inflight, most atomic.Int64
}

func newMemStore(t *testing.T) *memStore {
	st, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &memStore{Store: st}
}

func (m *memStore) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	n := m.inflight.Add(1)
	defer m.inflight.Add(-1)
	for most := m.most.Load(); n > most && !m.most.CompareAndSwap(most, n); most = m.most.Load() {
	}
	if m.fail.Load() {
		return context.DeadlineExceeded
	}
	if d := time.Duration(m.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return m.Store.Apply(ctx, now, buckets, results)
}

// count is what the bucket key of limit l counts at now.
func (m *memStore) count(t *testing.T, key string, l limit.Limit, now time.Time) int64 {
	t.Helper()
	states := make([]limit.State, 1)
	at, err := m.Store.State(context.Background(), now, []limit.Bucket{{Key: key, Limit: l}}, states)
	if err != nil {
		t.Fatal(err)
	}
	return limit.Count(states[0], l, at)
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const testConfig = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
`

type harness struct {
	svc   *Service
	store *memStore
	clock *clock
	conn  *grpc.ClientConn
}

func newHarness(t *testing.T, cfgText string, opts Options) *harness {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "rlqs.yaml", Data: []byte(cfgText)})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{store: newMemStore(t), clock: &clock{now: time.Unix(1_800_000_000, 0)}}
	opts.Store, opts.Registry, opts.Clock = h.store, NewMemoryRegistry(0), h.clock.Now
	if opts.Config == nil {
		opts.Config = func() *descriptors.Config { return cfg }
	}
	h.svc, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.conn = grpctest.Dial(t, grpctest.Serve(t, func(g *grpc.Server) { h.svc.Register(g) }, h.svc.ServerOptions()...))
	return h
}

// envoy is one stream, driven by hand.
type envoy struct {
	t      *testing.T
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	domain string
}

func (h *harness) envoy(t *testing.T, domain string) *envoy {
	t.Helper()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &envoy{t: t, stream: st, domain: domain}
}

type usage struct {
	bucket          map[string]string
	allowed, denied uint64
}

// report sends one report and returns the answer.
func (e *envoy) report(us ...usage) (*rlqsv3.RateLimitQuotaResponse, error) {
	e.t.Helper()
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain}
	for _, u := range us {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: u.bucket}, NumRequestsAllowed: u.allowed, NumRequestsDenied: u.denied,
			TimeElapsed: durationpb.New(0)})
	}
	if err := e.stream.Send(m); err != nil && err != io.EOF {
		return nil, err
	}
	// On io.EOF the stream has ended: Recv says how.
	return e.stream.Recv()
}

func (e *envoy) mustReport(us ...usage) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	e.t.Helper()
	r, err := e.report(us...)
	if err != nil {
		e.t.Fatalf("report: %v", err)
	}
	return r.GetBucketAction()
}

func tokens(a *rlqsv3.RateLimitQuotaResponse_BucketAction) *typev3.TokenBucket {
	return a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
}

func rateOf(a *rlqsv3.RateLimitQuotaResponse_BucketAction) float64 {
	tb := tokens(a)
	if tb == nil || tb.GetFillInterval().GetSeconds() == 0 {
		return 0
	}
	return float64(tb.GetTokensPerFill().GetValue()) / float64(tb.GetFillInterval().GetSeconds())
}

func alice() map[string]string { return map[string]string{"user": "alice"} }

// TestFirstReportIsAssignedAtOnce: a new Envoy's first report (one
// request, no time yet) gets a token bucket at once, of the whole limit
// while it is alone, whole seconds, a TTL of a few report intervals.
func TestFirstReportIsAssignedAtOnce(t *testing.T) {
	h := newHarness(t, testConfig, Options{})
	e := h.envoy(t, "edge")
	acts := e.mustReport(usage{bucket: alice(), allowed: 1})
	if len(acts) != 1 {
		t.Fatalf("%d actions for one bucket", len(acts))
	}
	a := acts[0]
	tb := tokens(a)
	if tb == nil || a.GetBucketId().GetBucket()["user"] != "alice" {
		t.Fatalf("action %v: want a token bucket for user=alice", a)
	}
	if r := rateOf(a); r < 87.5 || r > 100 {
		t.Fatalf("alone on 100/s: %v/s", r)
	}
	ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive()
	if ttl.GetNanos() != 0 || ttl.GetSeconds() < 3 || tb.GetFillInterval().GetNanos() != 0 || tb.GetFillInterval().GetSeconds() < 1 {
		t.Fatalf("TTL %v, fill interval %v: want whole seconds, a TTL of a few intervals", ttl, tb.GetFillInterval())
	}
	if tb.GetMaxTokens() < 1 || tb.GetMaxTokens() > 100 {
		t.Fatalf("max tokens %d of a limit of 100", tb.GetMaxTokens())
	}
	// The request it allowed is charged to the limit, as RLS calls are.
	if n := h.store.count(t, "edge|user=alice", limit.Rate{RequestsPerUnit: 100, Unit: limit.Second}.Limit(), h.clock.Now()); n != 1 {
		t.Fatalf("the bucket counts %d after a report of 1 allowed", n)
	}
}

// TestUnequalDemandsShareMaxMinFair: two Envoys on one user, one wanting
// 10/s, the other as much as it can: the first keeps its 10, the other
// gets the rest; together no more than the limit.
func TestUnequalDemandsShareMaxMinFair(t *testing.T) {
	h := newHarness(t, testConfig, Options{})
	small, big := h.envoy(t, "edge"), h.envoy(t, "edge")
	small.mustReport(usage{bucket: alice(), allowed: 1})
	big.mustReport(usage{bucket: alice(), allowed: 1})
	var rs, rb float64
	for range 4 {
		h.clock.add(5 * time.Second)
		rs = rateOf(small.mustReport(usage{bucket: alice(), allowed: 50})[0])
		rb = rateOf(big.mustReport(usage{bucket: alice(), allowed: 250, denied: 1000})[0])
	}
	t.Logf("shares %v and %v", rs, rb)
	if rs < 8 || rs > 10.5 || rb < 80 || rs+rb > 100 {
		t.Fatalf("demands 10/s and 250/s on 100/s: shares %v and %v, want about 10 and 90, no more than 100 together", rs, rb)
	}
}

// TestNestedLevelsDivideTheParent: a user's 100/s is divided among the
// user's buckets on every Envoy, each action no more than its own 10/s.
func TestNestedLevelsDivideTheParent(t *testing.T) {
	h := newHarness(t, testConfig, Options{})
	e := h.envoy(t, "edge")
	a := map[string]string{"user": "alice", "action": "read"}
	b := map[string]string{"user": "alice", "action": "write"}
	e.mustReport(usage{bucket: a, allowed: 1}, usage{bucket: b, allowed: 1})
	h.clock.add(5 * time.Second)
	acts := e.mustReport(usage{bucket: a, allowed: 500, denied: 500}, usage{bucket: b, allowed: 500, denied: 500})
	for _, act := range acts {
		if r := rateOf(act); r > 10 || r < 5 {
			t.Fatalf("an action of a user with 10/s per action: %v/s", r)
		}
	}
}

// TestUnmatchedAndUnlimited: a BucketId the config has no limit for is
// allowed (or denied, as asked); an allow-listed one is allowed.
func TestUnmatchedAndUnlimited(t *testing.T) {
	for _, c := range []struct {
		unmatched Kind
		want      typev3.RateLimitStrategy_BlanketRule
	}{{AllowAll, typev3.RateLimitStrategy_ALLOW_ALL}, {DenyAll, typev3.RateLimitStrategy_DENY_ALL}} {
		h := newHarness(t, testConfig, Options{Unmatched: c.unmatched})
		e := h.envoy(t, "edge")
		acts := e.mustReport(usage{bucket: map[string]string{"path": "/"}, allowed: 1}, usage{bucket: map[string]string{"client": "internal"}, allowed: 1})
		if got := acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != c.want {
			t.Errorf("unmatched with %v: %v", c.unmatched, got)
		}
		if got := acts[1].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Errorf("allow-listed: %v", got)
		}
	}
}

// TestBadReports: a first report without a domain, an unknown domain, an
// empty or oversized BucketId, too many buckets: a clear gRPC error.
func TestBadReports(t *testing.T) {
	h := newHarness(t, testConfig, Options{MaxBucketsPerReport: 3, MaxEntries: 2, MaxEntryBytes: 8})
	for _, c := range []struct {
		domain string
		us     []usage
		code   codes.Code
		msg    string
	}{
		{"", []usage{{bucket: alice()}}, codes.InvalidArgument, "names no domain"},
		{"nope", []usage{{bucket: alice()}}, codes.InvalidArgument, `unknown domain "nope"`},
		{"edge", []usage{{bucket: map[string]string{}}}, codes.InvalidArgument, "has no pairs"},
		{"edge", []usage{{bucket: map[string]string{"a": "1", "b": "2", "c": "3"}}}, codes.InvalidArgument, "has 3 pairs"},
		{"edge", []usage{{bucket: map[string]string{"user": strings.Repeat("x", 9)}}}, codes.InvalidArgument, "value of 9 bytes"},
		{"edge", []usage{{bucket: alice()}, {bucket: alice()}, {bucket: alice()}, {bucket: alice()}}, codes.InvalidArgument, "at most 3"},
	} {
		_, err := h.envoy(t, c.domain).report(c.us...)
		if st, _ := status.FromError(err); st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("domain %q, %d buckets: %v, want %v with %q", c.domain, len(c.us), err, c.code, c.msg)
		}
	}
}

// TestAbandon: a bucket no Envoy reports a request of for AbandonAfter is
// sent AbandonAction, and its state freed; a report of it after is a new
// bucket, answered with an assignment.
func TestAbandon(t *testing.T) {
	h := newHarness(t, testConfig, Options{AbandonAfter: 20 * time.Second})
	e := h.envoy(t, "edge")
	e.mustReport(usage{bucket: alice(), allowed: 1})
	for range 3 {
		h.clock.add(5 * time.Second)
		if acts := e.mustReport(usage{bucket: alice()}); acts[0].GetAbandonAction() != nil {
			t.Fatal("abandoned before AbandonAfter")
		}
	}
	h.clock.add(6 * time.Second)
	acts := e.mustReport(usage{bucket: alice()})
	if acts[0].GetAbandonAction() == nil {
		t.Fatalf("idle for 21s of 20: %v, want AbandonAction", acts[0])
	}
	if v := h.svc.Bucket("edge", alice(), true); v.Streams != 0 || len(v.Listed) != 0 {
		t.Fatalf("the abandoned bucket is still held: %+v", v)
	}
	if acts := e.mustReport(usage{bucket: alice(), allowed: 1}); tokens(acts[0]) == nil {
		t.Fatalf("reported again after abandon: %v", acts[0])
	}
}

// TestFailureModes: while the store fails, each report is answered by the
// failure mode, with a short TTL; nothing is lost of what was allowed.
func TestFailureModes(t *testing.T) {
	for _, c := range []struct {
		mode FailureMode
		want string
	}{{FailAllow, "ALLOW_ALL"}, {FailDeny, "DENY_ALL"}, {FailLocal, "token_bucket"}} {
		h := newHarness(t, testConfig, Options{FailureMode: c.mode})
		e := h.envoy(t, "edge")
		e.mustReport(usage{bucket: alice(), allowed: 1})
		h.store.fail.Store(true)
		h.clock.add(5 * time.Second)
		acts := e.mustReport(usage{bucket: alice(), allowed: 7})
		got := acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule().String()
		if tokens(acts[0]) != nil {
			got = "token_bucket"
		}
		if got != c.want {
			t.Errorf("failure mode %v: %s, want %s", c.mode, got, c.want)
		}
		if ttl := acts[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().GetSeconds(); ttl < 1 || ttl > 15 {
			t.Errorf("failure mode %v: TTL %ds, want a short one", c.mode, ttl)
		}
		// Back: the 7 it allowed meanwhile are charged with the next report.
		h.store.fail.Store(false)
		h.clock.add(5 * time.Second)
		e.mustReport(usage{bucket: alice(), allowed: 2})
		// 10 charged in 10 s at 100/s: all but what the last charge left.
		if n := h.store.count(t, "edge|user=alice", limit.Rate{RequestsPerUnit: 100, Unit: limit.Second}.Limit(), h.clock.Now()); n != 9 {
			t.Errorf("failure mode %v: the bucket holds %d after reports of 1, 7 (while failing) and 2, 5 s apart, want the 9 of the last call (the 1 before leaked)", c.mode, n)
		}
	}
}

// TestAnswerBudgetFollowsTheInterval: a report's store calls may take
// half its stream's report interval, not only the store timeout sized for
// RLS calls: with reports 4 s apart, a store taking 300 ms still answers
// (past a 50 ms timeout), while a first report, of no interval yet, gets
// the failure mode.
func TestAnswerBudgetFollowsTheInterval(t *testing.T) {
	h := newHarness(t, testConfig, Options{FailureMode: FailAllow, StoreTimeout: 50 * time.Millisecond})
	e := h.envoy(t, "edge")
	h.store.delay.Store(int64(300 * time.Millisecond))
	if acts := e.mustReport(usage{bucket: alice(), allowed: 1}); tokens(acts[0]) != nil {
		t.Fatalf("a first report past the store timeout was assigned %v, want the failure mode's ALLOW_ALL", acts[0])
	}
	h.clock.add(4 * time.Second)
	acts := e.mustReport(usage{bucket: alice(), allowed: 1})
	if tokens(acts[0]) == nil {
		t.Fatalf("reports 4 s apart, a store taking 300 ms: %v, want a token bucket", acts[0])
	}
}

// TestQuietFailureSendsNothing: the default failure mode sends nothing,
// so that Envoys keep their assignments until the TTL.
func TestQuietFailureSendsNothing(t *testing.T) {
	h := newHarness(t, testConfig, Options{})
	e := h.envoy(t, "edge")
	e.mustReport(usage{bucket: alice(), allowed: 1})
	h.store.fail.Store(true)
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: alice()}, NumRequestsAllowed: 3}}}
	if err := e.stream.Send(m); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := e.stream.Recv(); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("an answer while the store fails: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestFailStaticAnswersFromTheLastDivision: with FailStatic, while the
// store fails, every report is still answered with the division in force
// (the same token bucket, its TTL renewed), for FailStatic from the first
// failed charge; past it, the failure mode answers (the default: nothing);
// once the store answers, shares are divided afresh and what was allowed
// meanwhile is charged.
func TestFailStaticAnswersFromTheLastDivision(t *testing.T) {
	h := newHarness(t, testConfig, Options{FailStatic: 30 * time.Second})
	a, b := h.envoy(t, "edge"), h.envoy(t, "edge")
	a.mustReport(usage{bucket: alice(), allowed: 1})
	b.mustReport(usage{bucket: alice(), allowed: 1})
	var before *rlqsv3.RateLimitQuotaResponse_BucketAction
	for range 4 { // demands of 100/s each, measured over reports 1 s apart
		h.clock.add(time.Second)
		before = a.mustReport(usage{bucket: alice(), allowed: 50, denied: 50})[0]
		b.mustReport(usage{bucket: alice(), allowed: 50, denied: 50})
	}
	if r := rateOf(before); r < 40 || r > 50 {
		t.Fatalf("two Envoys wanting 100/s of 100/s: %.1f/s each, want about 50: %v", r, before)
	}
	h.store.fail.Store(true)
	for s := range 29 {
		h.clock.add(time.Second)
		acts := a.mustReport(usage{bucket: alice(), allowed: 50, denied: 50})
		b.mustReport(usage{bucket: alice(), allowed: 50, denied: 50})
		if tokens(acts[0]) == nil || rateOf(acts[0]) != rateOf(before) || acts[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().GetSeconds() < 3 {
			t.Fatalf("%d s into the fault: %v, want the token bucket in force, %v, renewed", s+1, acts[0], before)
		}
	}
	// 31 s after the first failed charge: the failure mode, unavailable.
	h.clock.add(3 * time.Second)
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: alice()}, NumRequestsAllowed: 50, NumRequestsDenied: 50}}}
	if err := a.stream.Send(m); err != nil {
		t.Fatal(err)
	}
	got := make(chan *rlqsv3.RateLimitQuotaResponse, 1)
	go func() { r, _ := a.stream.Recv(); got <- r }()
	select {
	case r := <-got:
		t.Fatalf("an answer past FailStatic: %v", r)
	case <-time.After(200 * time.Millisecond):
	}
	h.store.fail.Store(false)
	h.clock.add(time.Second)
	if err := a.stream.Send(m); err != nil {
		t.Fatal(err)
	}
	if r := <-got; tokens(r.GetBucketAction()[0]) == nil {
		t.Fatalf("the store back: %v, want a token bucket", r)
	}
	// What a allowed while the store failed (50 a report, 31 reports),
	// owed, is charged at once with its first report after (b's with its
	// own next one).
	if n := h.store.count(t, "edge|user=alice", limit.Rate{RequestsPerUnit: 100, Unit: limit.Second}.Limit(), h.clock.Now()); n != 31*50 {
		t.Errorf("the bucket holds %d once the store is back, want the %d a allowed while it failed", n, 31*50)
	}
}

// stuckStream opens a stream that sends reports of 2,000 buckets, a
// second apart on the harness's clock, and never reads the answers, and
// returns once the service's answers to it are stuck: gRPC's windows grow
// with what is sent at once, but they fill all the same.
func stuckStream(t *testing.T, h *harness, obs *countingObserver) {
	t.Helper()
	slow := h.envoy(t, "edge")
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
	for i := range 2000 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"user": fmt.Sprintf("a-user-with-a-long-name-%06d", i)}},
			NumRequestsAllowed: 1, TimeElapsed: durationpb.New(0)})
	}
	go func() {
		for slow.stream.Send(m) == nil {
			h.clock.add(time.Second)
		}
	}()
	waitFor(t, 2*time.Second, "the slow stream's buckets", func() bool { return h.svc.Buckets() >= 2000 })
	for reports := uint64(0); ; {
		time.Sleep(500 * time.Millisecond)
		n := obs.reports.Load()
		if n == reports {
			return
		}
		reports = n
	}
}

// TestStreamThatStopsReading: a client that sends reports of 2,000
// buckets and never reads the answers. Once its answers are stuck, the
// service ends the stream after its TTL (3 s, reports 1 s apart),
// freeing its buckets; meanwhile another stream's reports are answered
// as ever.
func TestStreamThatStopsReading(t *testing.T) {
	obs := &countingObserver{}
	h := newHarness(t, testConfig, Options{Observer: obs})
	fast := h.envoy(t, "edge")
	fast.mustReport(usage{bucket: alice(), allowed: 1})
	stuckStream(t, h, obs)
	start := time.Now()
	for time.Since(start) < 10*time.Second && h.svc.Streams() > 1 {
		began := time.Now()
		if acts := fast.mustReport(usage{bucket: alice(), allowed: 1}); len(acts) != 1 {
			t.Fatalf("the other stream: %d actions", len(acts))
		}
		if took := time.Since(began); took > time.Second {
			t.Fatalf("the other stream's report took %s while the slow one was stuck", took)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ended := time.Since(start)
	if n := h.svc.Streams(); n != 1 {
		t.Fatalf("%d streams %s after the slow one's answers were stuck, want it ended after its TTL (3 s)", n, ended)
	}
	t.Logf("the slow stream ended %s after its answers were stuck, after %d reports", ended.Round(10*time.Millisecond), obs.reports.Load())
	if obs.stalled.Load() != 1 {
		t.Fatalf("%d streams counted stalled, want 1", obs.stalled.Load())
	}
	if n := h.svc.Buckets(); n != 1 {
		t.Fatalf("%d buckets held once the slow stream ended, want the other's 1", n)
	}
}

// TestCloseWithAStuckAnswer: Close ends a stream whose answer is stuck at
// once, without waiting for the answer (which waits for its client).
func TestCloseWithAStuckAnswer(t *testing.T) {
	obs := &countingObserver{}
	h := newHarness(t, testConfig, Options{Observer: obs})
	stuckStream(t, h, obs)
	h.svc.Close()
	waitFor(t, time.Second, "stream ended by Close", func() bool { return h.svc.Streams() == 0 })
}

// countingObserver counts reports and stalled streams.
type countingObserver struct {
	noObserver
	reports, stalled atomic.Uint64
}

func (o *countingObserver) Report(int) { o.reports.Add(1) }
func (o *countingObserver) Stalled()   { o.stalled.Add(1) }

// waitFor polls cond every 10 ms for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s after %s", what, d)
		}
	}
}

// TestReportsTakeTurns: with MaxAnswering 2, ten streams reporting at
// once, each charge taking 50 ms, are all answered, never more than two
// charged at once.
func TestReportsTakeTurns(t *testing.T) {
	h := newHarness(t, testConfig, Options{MaxAnswering: 2})
	h.store.delay.Store(int64(50 * time.Millisecond))
	var wg sync.WaitGroup
	for i := range 10 {
		e := h.envoy(t, "edge")
		wg.Go(func() {
			if acts := e.mustReport(usage{bucket: map[string]string{"user": fmt.Sprint("u", i)}, allowed: 1}); tokens(acts[0]) == nil {
				t.Errorf("stream %d: %v, want a token bucket", i, acts[0])
			}
		})
	}
	wg.Wait()
	if most := h.store.most.Load(); most != 2 {
		t.Fatalf("at most %d charges at once, want 2", most)
	}
}

// TestRegionClaimIsDivided: with regions, a level's Envoys divide their
// region's part of its limit (Options.Claim): half of alice's 100/s here,
// so one Envoy wanting 200/s is assigned about 50/s, its burst at most
// half the size.
func TestRegionClaimIsDivided(t *testing.T) {
	half := func(_ string, l limit.Limit) limit.Limit {
		l.Size /= 2
		l.DripRate *= 2
		return l
	}
	h := newHarness(t, testConfig, Options{Claim: half})
	e := h.envoy(t, "edge")
	e.mustReport(usage{bucket: alice(), allowed: 1})
	var last *rlqsv3.RateLimitQuotaResponse_BucketAction
	for range 4 {
		h.clock.add(time.Second)
		last = e.mustReport(usage{bucket: alice(), allowed: 100, denied: 100})[0]
	}
	if r := rateOf(last); r < 43 || r > 50 {
		t.Fatalf("an Envoy alone on half of 100/s: %.1f/s, want about 50: %v", r, last)
	}
	if b := tokens(last).GetMaxTokens(); b > 50 {
		t.Fatalf("a burst of %d, more than half the size", b)
	}
}

// TestRegionDemandIsTold: with regions, each report tells Options.Demand
// what its Envoy asks of each level, allowed and denied, until the
// assignments' TTL; the stream's end withdraws it.
func TestRegionDemandIsTold(t *testing.T) {
	type told struct {
		perSecond float64
		until     time.Time
	}
	var mu sync.Mutex
	last := map[string]told{}
	h := newHarness(t, testConfig, Options{Demand: func(_ any, key string, _ limit.Limit, perSecond float64, until time.Time) {
		mu.Lock()
		last[key] = told{perSecond, until}
		mu.Unlock()
	}})
	e := h.envoy(t, "edge")
	e.mustReport(usage{bucket: alice(), allowed: 1})
	for range 3 {
		h.clock.add(time.Second)
		e.mustReport(usage{bucket: alice(), allowed: 50, denied: 150})
	}
	mu.Lock()
	got, n := last["edge|user=alice"], len(last)
	mu.Unlock()
	if n != 1 || got.perSecond < 199 || got.perSecond > 201 {
		t.Fatalf("told %d levels, alice's %.1f/s, want 1 level and 200/s (allowed and denied): %v", n, got.perSecond, last)
	}
	if want := h.clock.Now().Add(3 * time.Second); !got.until.Equal(want) {
		t.Fatalf("until %v, want %v (three report intervals)", got.until, want)
	}
	// A bucket held to 10 a second by a level below (user/action) wants
	// no more than that of the user's level.
	trade := map[string]string{"user": "bob", "action": "trade"}
	e.mustReport(usage{bucket: trade, allowed: 1})
	for range 3 {
		h.clock.add(time.Second)
		e.mustReport(usage{bucket: alice(), allowed: 50, denied: 150}, usage{bucket: trade, allowed: 10, denied: 190})
	}
	mu.Lock()
	user, action := last["edge|user=bob"], last["edge|user=bob|action=trade"]
	mu.Unlock()
	if user.perSecond > 10.5 || action.perSecond < 199 {
		t.Fatalf("a bucket asking 200/s held to 10/s below: told %.1f/s of the user's level and %.1f/s of the action's, want at most 10 and 200", user.perSecond, action.perSecond)
	}
	e.stream.CloseSend()
	if _, err := e.stream.Recv(); err == nil {
		t.Fatal("the stream did not end")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got = last["edge|user=alice"]
		mu.Unlock()
		if got.perSecond == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream ended, its demand still told: %.1f/s", got.perSecond)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCloseEndsStreams: Close ends every stream with Unavailable (after
// the drain), so Envoys reconnect to another replica at their next report.
func TestCloseEndsStreams(t *testing.T) {
	h := newHarness(t, testConfig, Options{})
	e := h.envoy(t, "edge")
	e.mustReport(usage{bucket: alice(), allowed: 1})
	h.svc.Close()
	if _, err := e.stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("after Close: %v, want Unavailable", err)
	}
	if _, err := h.envoy(t, "edge").report(usage{bucket: alice()}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new stream after Close: %v, want Unavailable", err)
	}
}

// TestBucketCaps: a stream past its bucket cap, or all streams past
// theirs, get nothing for the extra buckets (their Envoy's own default
// applies), the others served; a stream that ends frees its part.
func TestBucketCaps(t *testing.T) {
	h := newHarness(t, testConfig, Options{MaxBuckets: 2, MaxTotalBuckets: 3})
	e := h.envoy(t, "edge")
	bob, carol := map[string]string{"user": "bob"}, map[string]string{"user": "carol"}
	acts := e.mustReport(usage{bucket: alice(), allowed: 1}, usage{bucket: bob, allowed: 1}, usage{bucket: carol, allowed: 1})
	if len(acts) != 2 {
		t.Fatalf("%d actions for 3 buckets on a cap of 2 a stream", len(acts))
	}
	other := h.envoy(t, "edge")
	if acts := other.mustReport(usage{bucket: alice(), allowed: 1}, usage{bucket: bob, allowed: 1}); len(acts) != 1 {
		t.Fatalf("%d actions for a second stream's 2 buckets, 2 of 3 held already", len(acts))
	}
	e.stream.CloseSend()
	if _, err := e.stream.Recv(); err == nil {
		t.Fatal("the stream did not end")
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.svc.buckets.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if acts := other.mustReport(usage{bucket: bob, allowed: 1}); len(acts) != 1 {
		t.Fatalf("a bucket refused after the other stream freed its 2: %d actions", len(acts))
	}
}
