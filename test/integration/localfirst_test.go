package integration

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/localfirst"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// localFirstConfig has one limit of 100 a second per algorithm.
const localFirstConfig = `
domain: api
descriptors:
  - key: leaky
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: sliding
    sliding_window: {limit: 100, window: 1s, resolution: 100ms}
  - key: fixed
    fixed_window: {limit: 100, window: 1s}
  - key: usage
    charge: always
    fixed_window: {limit: 100, window: 1s}
`

// localFirstInterval is the sync interval of the bound test.
const localFirstInterval = 200 * time.Millisecond

// TestLocalFirstBound hammers each algorithm's limit of 100 a second for 5
// seconds through three local-first replicas and, at the same time,
// through three exact ones, on one Redis (single and Cluster), each the
// binary at its default flags (the over-limit cache on in both modes) but
// for a store timeout of a second: the load keeps a small machine's CPUs
// busy, and a call that waits for one past the default 100 ms would be
// answered Unavailable, which the bound does not count (the failure mode
// tests check the timeout). The local-first replicas must admit 80% to
// 110% of the hits the exact ones admit. A usage budget of 100 a second (charge: always) is hammered as
// Envoy does: a check, then, if admitted, a charge of the request's cost.
// Each limit is hammered twice, on buckets of their own: by requests of
// one hit (the usage charges: 3), and by requests of mixed sizes, from 1
// to a fifth of the limit (mixedMax), where a request refused for its
// size must not keep smaller ones from the room left.
func TestLocalFirstBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 5 seconds per topology")
	}
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			args := append(redisArgs(start(t)), "-store-timeout", "1s")
			modes := map[string][]*replica{
				"exact":       binaryReplicas(t, 3, localFirstConfig, args...),
				"local-first": binaryReplicas(t, 3, localFirstConfig, append(args, "-sync-interval", localFirstInterval.String())...),
			}

			const run = 5 * time.Second
			// Start half way through a second, so that both modes see the
			// same six fixed windows, the first and last halves.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1500 * time.Millisecond)))
			admitted := map[string]*atomic.Int64{} // hits, by mode and load
			var calls atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			errs := make(chan error, 1)
			for mode, rs := range modes {
				for _, ld := range boundLoads {
					n := &atomic.Int64{}
					admitted[mode+" "+ld.String()] = n
					entry := ld.algo + "=" + mode
					if ld.mixed {
						entry += "-mixed"
					}
					for _, r := range rs {
						for range ld.workers() {
							wg.Go(func() {
								for ctx.Err() == nil {
									// The request's cost: its hits, or a
									// usage limit's charge after the check.
									cost := ld.cost()
									first := request([]string{entry})
									if ld.algo == "usage" {
										first.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
									} else {
										first.Descriptors[0].HitsAddend = wrapperspb.UInt64(cost)
									}
									resp, err := r.client.ShouldRateLimit(context.Background(), first)
									if err == nil && ld.algo == "usage" && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
										charge := request([]string{entry})
										charge.Descriptors[0].HitsAddend = wrapperspb.UInt64(cost)
										_, err = r.client.ShouldRateLimit(context.Background(), charge) // at stream end
									}
									if err != nil {
										select {
										case errs <- fmt.Errorf("%s, through a replica: %w", entry, err):
										default:
										}
										return
									}
									calls.Add(1)
									if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
										n.Add(int64(cost))
									}
									time.Sleep(ld.pause())
								}
							})
						}
					}
				}
			}
			wg.Wait()
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			for _, ld := range boundLoads {
				exact, local := admitted["exact "+ld.String()].Load(), admitted["local-first "+ld.String()].Load()
				ratio := float64(local) / float64(exact)
				t.Logf("%s: exact admitted %d hits, local-first %d (%.0f%%), of %d calls in all", ld, exact, local, 100*ratio, calls.Load())
				floor := int64(400)
				if ld.algo == "usage" {
					floor = 300 // of 100 a second, charged after their check
				}
				if exact < floor {
					t.Fatalf("%s: the exact replicas admitted %d hits: the load did not keep the limit busy", ld, exact)
				}
				if ratio < 0.8 || ratio > 1.1 {
					t.Errorf("%s: local-first admitted %d hits, %.0f%% of exact's %d, want 80%% to 110%%", ld, local, 100*ratio, exact)
				}
			}
		})
	}
}

// boundLoad is one of TestLocalFirstBound's loads: a limit of
// localFirstConfig, hammered by requests of one size or of mixed sizes.
type boundLoad struct {
	algo  string
	mixed bool
}

// boundLoads are the loads of TestLocalFirstBound, each on buckets of its
// own.
var boundLoads = []boundLoad{
	{"leaky", false}, {"sliding", false}, {"fixed", false}, {"usage", false},
	{"leaky", true}, {"sliding", true}, {"fixed", true}, {"usage", true},
}

// mixedMax is the largest request of a mixed load: a fifth of the limit.
const mixedMax = 100 / 5

func (ld boundLoad) String() string {
	if ld.mixed {
		return ld.algo + " (mixed sizes)"
	}
	return ld.algo
}

// workers is the goroutines per replica and mode: requests of mixed sizes
// take the limit's room in fewer calls.
func (ld boundLoad) workers() int {
	if ld.mixed {
		return 1
	}
	return 2
}

// pause is the wait between a worker's requests: many times the limit,
// without starving the other replicas of CPU. Mixed charges of a usage
// budget come less often (still thirty times the budget): a check
// admitted while another worker's charge is under way lets that budget
// overshoot by a charge, up to mixedMax, in either mode, and over six
// windows that chance would decide the totals more than the mode.
func (ld boundLoad) pause() time.Duration {
	if ld.mixed && ld.algo == "usage" {
		return 10 * time.Millisecond
	}
	return time.Millisecond
}

// cost draws a request's hits (a usage charge's, after its check).
func (ld boundLoad) cost() uint64 {
	switch {
	case ld.mixed:
		return 1 + rand.Uint64N(mixedMax)
	case ld.algo == "usage":
		return 3
	}
	return 1
}

// TestLocalFirstFewRedisCalls checks that local-first replicas under a
// large limit ask Redis about buckets, not requests: 3000 requests on 10
// keys cost a few calls per key. A key's first requests are decided on
// Redis, the third asks for units, in the background, and the rest are
// decided locally: once the asks are answered, the last 2900 requests
// make no more than a call or so per key. (While an ask is out, requests
// for its bucket are decided on Redis: how many depends on how soon the
// machine runs the ask, so the first 100 are counted apart.)
func TestLocalFirstFewRedisCalls(t *testing.T) {
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "localfirst.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 1000000, drip_rate: 1s}
`)})
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	// In process, wired as serve wires it with -sync-interval 1h, so that
	// Redis's command counts are the replica's calls alone (the binary's
	// health checks and reset subscription add their own).
	st, err := redis.New(servedRedis(redis.ClientOptions{URL: srv.URL()}, true))
	if err != nil {
		t.Fatal(err)
	}
	lf, err := localfirst.New(st, localfirst.Options{Interval: time.Hour, MaxBytes: servedTableBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	opts := rls.Options{Store: lf, Config: cfg, Logger: slog.New(slog.DiscardHandler)}
	asServed(&opts)
	svc, err := rls.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	scripts := func() int {
		c := redistest.CommandCalls(t, admin)
		return c["evalsha"] + c["eval"]
	}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			resp, err := svc.ShouldRateLimit(context.Background(), request([]string{fmt.Sprintf("user=u%d", i%10)}))
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("call %d: %v %v", i, resp, err)
			}
		}
	}
	start := scripts()
	send(0, 100)
	// The asks answered: no script call for 100 ms.
	warm, quiet := scripts(), time.Now()
	for time.Since(quiet) < 100*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
		if n := scripts(); n != warm {
			warm, quiet = n, time.Now()
		}
	}
	send(100, 3000)
	steady := scripts() - warm
	t.Logf("3000 requests on 10 keys: %d script calls for the first 100, %d for the other 2900", warm-start, steady)
	if steady > 10 {
		t.Fatalf("%d script calls for 2900 requests on 10 keys holding units, want at most one per key", steady)
	}
}

// TestColdBucketsCostWhatExactDoes sends requests each for a new bucket
// (a long tail of keys, each seen once) to an exact replica and to a
// local-first one, under large limits and small ones: the local-first
// replica makes no more Redis calls, and has Redis run no more commands,
// than the exact one, its last sync included.
func TestColdBucketsCostWhatExactDoes(t *testing.T) {
	for name, limits := range map[string]string{
		"large": "leaky_bucket: {size: 1000, drip_rate: 1s}\n    descriptors:\n      - key: action\n        fixed_window: {limit: 100, window: 1m}",
		"small": "leaky_bucket: {size: 10, drip_rate: 1s}\n    descriptors:\n      - key: action\n        fixed_window: {limit: 5, window: 1m}",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, _, err := descriptors.Parse(descriptors.Source{Name: "cold.yaml", Data: []byte("domain: api\ndescriptors:\n  - key: user\n    " + limits + "\n")})
			if err != nil {
				t.Fatal(err)
			}
			srv := redistest.Start(t)
			admin := srv.Client(t)
			log := slog.New(slog.DiscardHandler)
			cost := map[string]map[string]int{}
			for _, mode := range []string{"exact", "local-first"} {
				// In process, wired as serve wires each mode, so that
				// Redis's command counts are the replica's calls alone
				// (the binary's health checks and reset subscription add
				// their own).
				ro := servedRedis(redis.ClientOptions{URL: srv.URL()}, mode == "local-first")
				ro.Prefix, ro.Logger = mode+":", log
				st, err := redis.New(ro)
				if err != nil {
					t.Fatal(err)
				}
				var store rls.Store = st
				closer := st.Close
				if mode == "local-first" {
					lf, err := localfirst.New(st, localfirst.Options{Interval: 100 * time.Millisecond, MaxBytes: servedTableBytes, Logger: log})
					if err != nil {
						t.Fatal(err)
					}
					store, closer = lf, lf.Close
				}
				opts := rls.Options{Store: store, Config: cfg, Logger: log}
				asServed(&opts)
				svc, err := rls.New(opts)
				if err != nil {
					t.Fatal(err)
				}
				before := redistest.CommandCalls(t, admin)
				for i := range 300 {
					resp, err := svc.ShouldRateLimit(context.Background(), request([]string{fmt.Sprintf("user=u%d", i), "action=read"}))
					if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
						t.Fatalf("%s: call %d: %v %v", mode, i, resp, err)
					}
				}
				closer() // the last sync charges what was admitted on trust
				after := redistest.CommandCalls(t, admin)
				cost[mode] = map[string]int{}
				for name, n := range after {
					if name != "info" {
						cost[mode][name] = n - before[name]
						cost[mode]["all"] += n - before[name]
					}
				}
				cost[mode]["scripts"] = cost[mode]["evalsha"] + cost[mode]["eval"]
			}
			t.Logf("300 requests, each for new buckets: exact %v; local-first %v", cost["exact"], cost["local-first"])
			for _, what := range []string{"scripts", "all"} {
				if cost["local-first"][what] > cost["exact"][what] {
					t.Errorf("local-first: %d %s calls for 300 cold requests, exact mode %d", cost["local-first"][what], what, cost["exact"][what])
				}
			}
			if cost["exact"]["scripts"] < 300 || cost["local-first"]["set"] < 600 {
				t.Fatalf("exact mode made %d script calls and local-first %d SETs for 300 requests of 2 buckets: not all were charged",
					cost["exact"]["scripts"], cost["local-first"]["set"])
			}
		})
	}
}
