package rlqs_test

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
	"github.com/envoy-rls/envoy-rls/internal/rlqsclient"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// sim is envoy-rls and Envoys on one manual clock: the Envoys' requests,
// reports and token buckets, and the service's decisions, at the same
// simulated instants.
type sim struct {
	t     *testing.T
	clock *rlqsclient.ManualClock
	conn  *grpc.ClientConn
	svc   *rlqs.Service
	store *memory.Store
	usage *rlqs.Usage
	cfg   *descriptors.Config
}

func newSim(t *testing.T, config string) *sim {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "sim.yaml", Data: []byte(config)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, clock: rlqsclient.NewManualClock(time.Unix(1_800_000_000, 0)), store: st, usage: &rlqs.Usage{}, cfg: cfg}
	s.svc, err = rlqs.New(rlqs.Options{Store: s.store, Registry: rlqs.NewMemoryRegistry(rlqs.DefaultDivideEvery), Usage: s.usage,
		Config: func() *descriptors.Config { return cfg }, Clock: s.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s.conn = grpctest.Dial(t, grpctest.Serve(t, func(g *grpc.Server) { s.svc.Register(g) }, s.svc.ServerOptions()...))
	return s
}

// envoy is one Envoy of the simulation, sending rate requests a second
// for one bucket.
type envoy struct {
	inst    *rlqsclient.Instance
	bucket  map[string]string // nil: the run's
	rate    float64
	owed    float64 // requests due but not sent yet
	allowed int64   // in the measured span
}

func (s *sim) envoy(rate float64) *envoy {
	inst := rlqsclient.Start(context.Background(), s.conn, rlqsclient.Options{Domain: "edge", Clock: s.clock})
	s.t.Cleanup(inst.Close)
	return &envoy{inst: inst, rate: rate}
}

// report ticks e's report and waits for its answer to be applied.
func (s *sim) report(e *envoy) {
	s.t.Helper()
	before := e.inst.Stats().ResponsesReceived
	e.inst.Report()
	deadline := time.Now().Add(5 * time.Second)
	for e.inst.Stats().ResponsesReceived == before {
		if time.Now().After(deadline) {
			s.t.Fatalf("no answer to a report within 5s: %+v", e.inst.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// rls is a caller of the RLS service on one descriptor: a request is
// decided on the store, exactly, as the RLS service decides it.
type rls struct {
	rate    float64
	owed    float64
	allowed int64
}

func (s *sim) call(r *rls, key string, l limit.Limit, measure bool) {
	bs := []limit.Bucket{{Key: key, Limit: l, Hits: 1}}
	res := make([]limit.Result, 1)
	s.usage.Asked(bs) // as the RLS service tells it, before anything answers
	s.store.Apply(context.Background(), s.clock.Now(), bs, res)
	if res[0].Admitted && measure {
		r.allowed++
	}
}

// run advances the clock by d in steps of 10ms, each Envoy sending its
// requests, reporting every 5s (each at its own offset), and counting
// what it allowed when measure is set.
func (s *sim) run(envoys []*envoy, bucket map[string]string, d time.Duration, measure bool) {
	s.runWith(envoys, nil, bucket, d, measure)
}

// runWith is run with an RLS caller on the bucket's deepest level too.
func (s *sim) runWith(envoys []*envoy, caller *rls, bucket map[string]string, d time.Duration, measure bool) {
	const step = 10 * time.Millisecond
	var levels []descriptors.Level
	if caller != nil {
		dom := s.cfg.Domain("edge")
		levels = dom.Resolve(dom.Order(bucket), nil, nil)
	}
	for elapsed := time.Duration(0); elapsed < d; elapsed += step {
		s.clock.Advance(step)
		if caller != nil {
			caller.owed += caller.rate * step.Seconds()
			for ; caller.owed >= 1; caller.owed-- {
				l := levels[len(levels)-1]
				s.call(caller, l.Key, l.Rule.Limit, measure)
			}
		}
		for i, e := range envoys {
			e.owed += e.rate * step.Seconds()
			b := e.bucket
			if b == nil {
				b = bucket
			}
			for ; e.owed >= 1; e.owed-- {
				if e.inst.Request(b) && measure {
					e.allowed++
				}
			}
			// Envoy reports every 5s; the Envoys' timers are not aligned.
			if offset := time.Duration(i) * 1300 * time.Millisecond; (s.clock.Now().Sub(time.Unix(1_800_000_000, 0))-offset)%(5*time.Second) == 0 {
				s.report(e)
			}
		}
	}
}

const simConfig = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
`

// TestEnvoysShareALimitFairly: four Envoys sending 10, 30, 150 and 200
// requests a second for one user's 100/s. Max-min fair, they should get
// 10, 30, 30 and 30. In steady state (after 30 s), the four together are
// allowed within 10% of the limit, and each at least 80% of its fair
// share, and no Envoy is sent an assignment it would drop or misread.
func TestEnvoysShareALimitFairly(t *testing.T) {
	s := newSim(t, simConfig)
	demands := []float64{10, 30, 150, 200}
	fair := []float64{10, 30, 30, 30}
	var envoys []*envoy
	for _, d := range demands {
		envoys = append(envoys, s.envoy(d))
	}
	alice := map[string]string{"user": "alice"}
	s.run(envoys, alice, 30*time.Second, false)
	const span = 30 * time.Second
	s.run(envoys, alice, span, true)
	total := 0.0
	for i, e := range envoys {
		got := float64(e.allowed) / span.Seconds()
		total += got
		t.Logf("Envoy %d wants %v/s: allowed %.1f/s (fair share %v)", i, demands[i], got, fair[i])
		if got < 0.8*fair[i] {
			t.Errorf("Envoy %d allowed %.1f/s, below 80%% of its fair share %v", i, got, fair[i])
		}
		if m := e.inst.Misreads(); len(m) > 0 {
			t.Errorf("Envoy %d misread or dropped %d assignments, the first: %+v", i, len(m), m[0])
		}
	}
	if math.Abs(total-100) > 10 {
		t.Errorf("the Envoys together allowed %.1f/s of a limit of 100/s", total)
	}
}

// TestAnEnvoyThatLeavesFreesItsShare: two Envoys each wanting the whole
// limit share it; when one closes its stream, the other gets it all
// within a few report intervals.
func TestAnEnvoyThatLeavesFreesItsShare(t *testing.T) {
	s := newSim(t, simConfig)
	a, b := s.envoy(200), s.envoy(200)
	alice := map[string]string{"user": "alice"}
	s.run([]*envoy{a, b}, alice, 30*time.Second, false)
	s.run([]*envoy{a, b}, alice, 10*time.Second, true)
	if got := float64(a.allowed) / 10; got < 40 || got > 60 {
		t.Fatalf("two Envoys on 100/s: the first allowed %.1f/s, want about 50", got)
	}
	b.inst.Close()
	s.run([]*envoy{a}, alice, 15*time.Second, false)
	a.allowed = 0
	s.run([]*envoy{a}, alice, 10*time.Second, true)
	if got := float64(a.allowed) / 10; got < 87 || got > 110 {
		t.Fatalf("alone after the other left: allowed %.1f/s, want about 100", got)
	}
}

// TestRLSAndRLQSShareOneLimit: an RLS caller wanting 60/s and two Envoys
// each wanting 100/s on one user's 100/s: the RLS calls take their part
// of the division (a third each), and all together are allowed within
// 10% of the limit.
func TestRLSAndRLQSShareOneLimit(t *testing.T) {
	s := newSim(t, simConfig)
	a, b := s.envoy(100), s.envoy(100)
	caller := &rls{rate: 60}
	alice := map[string]string{"user": "alice"}
	s.runWith([]*envoy{a, b}, caller, alice, 30*time.Second, false)
	const span = 30 * time.Second
	s.runWith([]*envoy{a, b}, caller, alice, span, true)
	ra, rb, rr := float64(a.allowed)/span.Seconds(), float64(b.allowed)/span.Seconds(), float64(caller.allowed)/span.Seconds()
	t.Logf("Envoys %.1f/s and %.1f/s, RLS calls %.1f/s", ra, rb, rr)
	if total := ra + rb + rr; math.Abs(total-100) > 10 {
		t.Errorf("RLS and RLQS together allowed %.1f/s of a limit of 100/s", total)
	}
	for _, got := range []float64{ra, rb, rr} {
		if got < 0.8*100.0/3 {
			t.Errorf("a part of %.1f/s, below 80%% of a third of the limit", got)
		}
	}
}

// TestNestedLevels: one user's 100/s with 10/s per action: an Envoy
// sending 50/s for each of two actions gets 10/s for each (the actions'
// limits bind), and a second Envoy on the user's other actions the rest
// of the user's limit.
func TestNestedLevels(t *testing.T) {
	s := newSim(t, `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
    descriptors:
      - key: action
        value: small
        rate_limit: {unit: second, requests_per_unit: 10}
`)
	small, big := s.envoy(50), s.envoy(200)
	small.bucket = map[string]string{"user": "alice", "action": "small"}
	big.bucket = map[string]string{"user": "alice", "action": "big"}
	s.run([]*envoy{small, big}, nil, 30*time.Second, false)
	s.run([]*envoy{small, big}, nil, 30*time.Second, true)
	rs, rb := float64(small.allowed)/30, float64(big.allowed)/30
	t.Logf("action small %.1f/s, the user's other action %.1f/s", rs, rb)
	if rs > 10.5 || rs < 8 || rb < 80 || rs+rb > 110 {
		t.Errorf("small %.1f/s (limit 10), big %.1f/s (want the rest of 100)", rs, rb)
	}
}
