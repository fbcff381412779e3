package integration

import (
	"context"
	"fmt"
	"log/slog"
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
// through three exact ones, on one Redis (single and Cluster): the
// local-first replicas must admit 80% to 110% of what the exact ones
// admit. A usage budget of 100 a second (charge: always) is hammered as
// Envoy does: a check, then, if admitted, a charge of the request's cost.
func TestLocalFirstBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 5 seconds per topology")
	}
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "localfirst.yaml", Data: []byte(localFirstConfig)})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			connect := start(t)
			newService := func(interval time.Duration) *rls.Service {
				st, err := redis.New(redis.Options{Connect: &connect, Logger: log, Pipeline: redis.DefaultPipeline, Batch: redis.DefaultBatch})
				if err != nil {
					t.Fatal(err)
				}
				var store rls.Store = st
				if interval > 0 {
					lf, err := localfirst.New(st, localfirst.Options{Interval: interval, Logger: log})
					if err != nil {
						t.Fatal(err)
					}
					store = lf
					t.Cleanup(func() { lf.Close() })
				} else {
					t.Cleanup(func() { st.Close() })
				}
				svc, err := rls.New(rls.Options{Store: store, Config: cfg, Logger: log})
				if err != nil {
					t.Fatal(err)
				}
				return svc
			}
			modes := map[string][]*rls.Service{}
			for _, m := range []struct {
				name     string
				interval time.Duration
			}{{"exact", 0}, {"local-first", localFirstInterval}} {
				for range 3 {
					modes[m.name] = append(modes[m.name], newService(m.interval))
				}
			}

			const run = 5 * time.Second
			const workers = 2 // per replica, algorithm and mode
			// Start half way through a second, so that both modes see the
			// same six fixed windows, the first and last halves.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1500 * time.Millisecond)))
			admitted := map[string]*atomic.Int64{}
			var calls atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			errs := make(chan error, 1)
			for mode, svcs := range modes {
				for _, algo := range []string{"leaky", "sliding", "fixed", "usage"} {
					n := &atomic.Int64{}
					admitted[mode+" "+algo] = n
					req := request([]string{algo + "=" + mode})
					check, charge := request([]string{algo + "=" + mode}), request([]string{algo + "=" + mode})
					check.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
					charge.Descriptors[0].HitsAddend = wrapperspb.UInt64(3)
					for _, svc := range svcs {
						for range workers {
							wg.Go(func() {
								for ctx.Err() == nil {
									first := req
									if algo == "usage" {
										first = check
									}
									resp, err := svc.ShouldRateLimit(context.Background(), first)
									if err == nil && algo == "usage" && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
										_, err = svc.ShouldRateLimit(context.Background(), charge) // at stream end
									}
									if err != nil {
										select {
										case errs <- err:
										default:
										}
										return
									}
									calls.Add(1)
									if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
										n.Add(1)
									}
									// Many times the limit, without starving
									// the other replicas of CPU.
									time.Sleep(time.Millisecond)
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
			for _, algo := range []string{"leaky", "sliding", "fixed", "usage"} {
				exact, local := admitted["exact "+algo].Load(), admitted["local-first "+algo].Load()
				ratio := float64(local) / float64(exact)
				t.Logf("%s: exact admitted %d, local-first %d (%.0f%%), of %d calls in all", algo, exact, local, 100*ratio, calls.Load())
				floor := int64(400)
				if algo == "usage" {
					floor = 100 // requests costing 3 of 100 a second
				}
				if exact < floor {
					t.Fatalf("%s: the exact replicas admitted %d: the load did not keep the limit busy", algo, exact)
				}
				if ratio < 0.8 || ratio > 1.1 {
					t.Errorf("%s: local-first admitted %d, %.0f%% of exact's %d, want 80%% to 110%%", algo, local, 100*ratio, exact)
				}
			}
		})
	}
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
	st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	lf, err := localfirst.New(st, localfirst.Options{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	svc, err := rls.New(rls.Options{Store: lf, Config: cfg, Logger: slog.New(slog.DiscardHandler)})
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
// local-first one, under limits large enough for a first sighting to be
// admitted on trust and under small ones, which never are: the local-first
// replica makes no more Redis calls, and has Redis run no more commands,
// than the exact one, its last sync included.
func TestColdBucketsCostWhatExactDoes(t *testing.T) {
	for name, limits := range map[string]string{
		"trusted": "leaky_bucket: {size: 1000, drip_rate: 1s}\n    descriptors:\n      - key: action\n        fixed_window: {limit: 100, window: 1m}",
		"small":   "leaky_bucket: {size: 10, drip_rate: 1s}\n    descriptors:\n      - key: action\n        fixed_window: {limit: 5, window: 1m}",
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
				st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}, Prefix: mode + ":", Logger: log})
				if err != nil {
					t.Fatal(err)
				}
				var store rls.Store = st
				closer := st.Close
				if mode == "local-first" {
					lf, err := localfirst.New(st, localfirst.Options{Interval: 100 * time.Millisecond, Logger: log})
					if err != nil {
						t.Fatal(err)
					}
					store, closer = lf, lf.Close
				}
				svc, err := rls.New(rls.Options{Store: store, Config: cfg, Logger: log})
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
