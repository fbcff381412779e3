package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

const serviceConfig = `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        name: trades
        leaky_bucket: {size: 5, drip_rate: 2s}
  - key: hot
    leaky_bucket: {size: 100, drip_rate: 1h}
  - key: hot-sliding
    sliding_window: {limit: 100, window: 1h, resolution: 1m}
  - key: hot-fixed
    fixed_window: {limit: 100, window: 8760h} # one edge a year: no test run crosses it
  - key: mixed
    limits:
      - leaky_bucket: {size: 60, drip_rate: 1s}
      - sliding_window: {limit: 100, window: 1m}
        name: per-minute
  - key: skew
    leaky_bucket: {size: 3, drip_rate: 10m}
  - key: v
    leaky_bucket: {size: 1, drip_rate: 1h}
    descriptors:
      - key: w
        leaky_bucket: {size: 1, drip_rate: 1h}
`

// replica is one service instance: its own Redis connections, service
// and gRPC server on a loopback port, as a separate process would have.
type replica struct {
	client rlsv3.RateLimitServiceClient
	store  *redis.Store // nil for the binary
}

// The binary's defaults with -store redis (cmd/envoy-rls: flags.go and
// serviceOptions), for the replicas a test builds in process.
const (
	servedStoreTimeout = 100 * time.Millisecond     // -store-timeout
	servedCacheSize    = 100000                     // -local-cache-size
	servedCacheBytes   = memory.DefaultMaxBytes / 8 // the cache's eighth of -memory-max-bytes
)

// asServed sets the service's options as serve sets them at its default
// flags on Redis: the store timeout and the over-limit cache.
func asServed(o *rls.Options) {
	o.StoreTimeout = servedStoreTimeout
	o.OverLimitCacheSize, o.OverLimitCacheBytes = servedCacheSize, servedCacheBytes
}

// servedRedis is the Redis store's options as openStore sets them at the
// default flags, for the local-first mode if localFirst (-sync-interval:
// requests then wait a millisecond for others, and a slot's calls go 4ms
// apart while requests keep coming, except on a Cluster).
func servedRedis(connect redis.ClientOptions, localFirst bool) redis.Options {
	o := redis.Options{Connect: &connect, Pipeline: redis.DefaultPipeline, Batch: redis.DefaultBatch, Breaker: onBreaker}
	if localFirst && !connect.Cluster {
		o.BatchWait, o.BatchPace = time.Millisecond, 4*time.Millisecond
	}
	return o
}

// servedTableBytes is the local-first table's bound at the default flags:
// -memory-max-bytes less the over-limit cache's share.
const servedTableBytes = memory.DefaultMaxBytes - servedCacheBytes

type replicaOptions struct {
	client      redis.ClientOptions
	mode        redis.Mode
	clock       func() time.Time
	callerClock bool
	pipeline    *redis.Pipeline     // nil: the binary's default
	config      *descriptors.Config // nil: serviceConfig
	prefix      string              // of the Redis keys; "": the default
	breaker     *redis.Breaker      // nil: the binary's default
	service     func(*rls.Options)  // sets more of the service's options
}

// startReplicas starts n replicas in process, each wired as serve wires
// one at its default flags on Redis, but for what o sets (a skewed clock
// is one thing only a replica in process can have).
func startReplicas(t *testing.T, n int, o replicaOptions) []*replica {
	t.Helper()
	cfg := o.config
	if cfg == nil {
		var err error
		if cfg, _, err = descriptors.Parse(descriptors.Source{Name: "service.yaml", Data: []byte(serviceConfig)}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	var replicas []*replica
	for range n {
		ro := servedRedis(o.client, false)
		ro.Mode, ro.CallerClock, ro.Logger, ro.Prefix = o.mode, o.callerClock, log, o.prefix
		if o.pipeline != nil {
			ro.Pipeline = *o.pipeline
		}
		if o.breaker != nil {
			ro.Breaker = *o.breaker
		}
		store, err := redis.New(ro)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		opts := rls.Options{Store: store, Config: cfg, Clock: o.clock, Logger: log}
		asServed(&opts)
		if o.service != nil {
			o.service(&opts)
		}
		svc, err := rls.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		// As serve does: resets through other replicas reach the cache.
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go store.WatchResets(ctx, svc.ForgetOverLimit)
		g := rls.NewGRPCServer(svc, nil, health.NewServer(), log)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		replicas = append(replicas, &replica{client: rlsv3.NewRateLimitServiceClient(conn), store: store})
	}
	return replicas
}

func request(descs ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "api"}
	for _, pairs := range descs {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, p := range pairs {
			k, v, _ := strings.Cut(p, "=")
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

func (r *replica) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// redisArgs are the binary's flags for the Redis of a topology.
func redisArgs(o redis.ClientOptions) []string {
	args := []string{"-store", "redis", "-redis-url", o.URL}
	if o.Cluster {
		args = append(args, "-redis-cluster")
	}
	return args
}

func topologies(t *testing.T) map[string]func(t *testing.T) redis.ClientOptions {
	return map[string]func(t *testing.T) redis.ClientOptions{
		"Single": func(t *testing.T) redis.ClientOptions {
			return redis.ClientOptions{URL: redistest.Start(t).URL()}
		},
		"Cluster": func(t *testing.T) redis.ClientOptions {
			return redis.ClientOptions{URL: redistest.StartCluster(t).URL(), Cluster: true}
		},
	}
}

// TestReplicasAdmitExactly sends 300 concurrent calls, rotating over three
// replicas, at a limit of 100 (a leaky bucket, a sliding window, a fixed
// window in turn): exactly 100 pass, 21 times over.
//
// The replicas have no store timeout: a burst of 300 calls on a small
// machine (the replicas' and the callers', under the race detector) can
// wait past 100 ms for a CPU, to be answered Unavailable, in process or
// not. The rest of serve's wiring cannot change how many pass: the
// over-limit cache only rejects what Redis rejected.
func TestReplicasAdmitExactly(t *testing.T) {
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			replicas := startReplicas(t, 3, replicaOptions{client: start(t), service: func(o *rls.Options) { o.StoreTimeout = 0 }})
			for round := range 21 {
				key := []string{"hot", "hot-sliding", "hot-fixed"}[round%3]
				req := request([]string{fmt.Sprintf("%s=round-%d", key, round)})
				var ok, over atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make(chan error, 300)
				for i := range 300 {
					wg.Go(func() {
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						resp, err := replicas[i%3].client.ShouldRateLimit(ctx, req)
						switch {
						case err != nil:
							errs <- err
						case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
							ok.Add(1)
						default:
							over.Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatalf("round %d: %v", round, err)
				}
				if ok.Load() != 100 || over.Load() != 200 {
					t.Fatalf("round %d (%s): %d OK and %d OVER_LIMIT, want exactly 100 and 200", round, key, ok.Load(), over.Load())
				}
			}
		})
	}
}

// TestReplicasShareHierarchy checks the hierarchy and all-or-nothing rule
// across replicas: trades through one replica count against the user level
// that another sees, and rejected trades count against nothing.
func TestReplicasShareHierarchy(t *testing.T) {
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			r := startReplicas(t, 3, replicaOptions{client: start(t)})
			trade := request([]string{"user=alice", "action=trade"})
			for i := range 5 {
				if resp := r[i%3].call(t, trade); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Fatalf("trade %d: %v", i, resp)
				}
			}
			for i := range 3 {
				resp := r[i].call(t, trade)
				if st := resp.GetStatuses()[0]; resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetCurrentLimit().GetName() != "trades" {
					t.Fatalf("sixth trade through replica %d: %v", i, resp)
				}
			}
			// 60 - 5 trades - this call; a rejected trade charged nothing.
			// (The user bucket leaks one a second: allow for a slow run.)
			resp := r[2].call(t, request([]string{"user=alice"}))
			if left := resp.GetStatuses()[0].GetLimitRemaining(); left < 54 || left > 56 {
				t.Fatalf("user level has %d left, want 54", left)
			}
			// Two descriptors in different slots: the rejected trade keeps
			// bob's bucket uncharged.
			for range 2 {
				resp = r[0].call(t, request([]string{"user=bob"}, []string{"user=alice", "action=trade"}))
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("bob and alice's trade: %v", resp)
				}
			}
			if left := r[1].call(t, request([]string{"user=bob"})).GetStatuses()[0].GetLimitRemaining(); left != 59 {
				t.Fatalf("bob has %d left after two rejected requests and one call, want 59", left)
			}
		})
	}
}

// TestSkewedClocksAgree runs two replicas whose clocks are an hour apart.
// The script store decides on Redis's clock, so they agree; deciding on each
// replica's own clock, they would not.
func TestSkewedClocksAgree(t *testing.T) {
	srv := redistest.Start(t)
	behind := func() time.Time { return time.Now().Add(-time.Hour) }
	run := func(callerClock bool, key string) rlsv3.RateLimitResponse_Code {
		slow := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL()}, clock: behind, callerClock: callerClock})[0]
		right := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL()}, callerClock: callerClock})[0]
		req := request([]string{"skew=" + key})
		for range 3 {
			if resp := slow.call(t, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("filling the bucket: %v", resp)
			}
		}
		return right.call(t, req).GetOverallCode()
	}
	if got := run(false, "server-clock"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("on the server's clock the full bucket answered %v, want OVER_LIMIT", got)
	}
	// The control: on each replica's clock, the hour between them drains
	// the bucket, and the replicas disagree.
	if got := run(true, "caller-clock"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("on the replicas' clocks the bucket answered %v; the test could not tell the clocks apart", got)
	}
}

// TestSpecialValuesNeverCollide sends descriptors whose values hold the key
// format's characters, newlines and non-ASCII text: each has a bucket of
// its own.
func TestSpecialValuesNeverCollide(t *testing.T) {
	srv := redistest.Start(t)
	r := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL()}})[0]
	// Every descriptor here is a path of its own: its levels must all be
	// fresh buckets.
	reqs := [][][]string{
		{{"v=a", "w=b"}}, {{"v=a|w=b"}}, {{"v=a|w", "w=b"}}, {{"v=a=b"}}, {{"v=a:b"}}, {{"v=c", "w=:b"}},
		{{"v={a}"}}, {{"v={d}", "w=b"}}, {{"v=}a{"}}, {{"v=a\nb"}}, {{"v=a\r\n"}}, {{"v=ümlaut"}}, {{"v=日本"}},
		{{"v=a%7Cw%3Db"}}, {{"v=a*"}}, {{"v=#1/minute"}}, {{"v="}}, {{"v= "}}, {{"v=}"}}, {{"v={"}},
	}
	for _, d := range reqs {
		if resp := r.call(t, request(d...)); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("first call for %q rejected: it shares a bucket with an earlier one", d)
		}
	}
	for _, d := range reqs {
		if resp := r.call(t, request(d...)); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("second call for %q admitted: its bucket was not kept", d)
		}
	}
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	levels := 0
	for _, d := range reqs {
		levels += len(d[0])
	}
	if len(keys) != levels {
		t.Fatalf("%d keys in Redis, want one per level, %d: %q", len(keys), levels, keys)
	}
}

// TestRedisOutage stops Redis under a running service: calls fail with
// Unavailable within their deadline, without panics or piling goroutines,
// and succeed again soon after Redis is back.
func TestRedisOutage(t *testing.T) {
	srv := redistest.New(t) // a process, which can be stopped and restarted
	srv.Restart()
	r := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL()}})[0]
	req := request([]string{"user=outage"})
	r.call(t, req)
	// The service's health watch, which also renews failed connections.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := health.NewServer()
	go rls.WatchStore(ctx, r.store, hs, slog.New(slog.DiscardHandler), false)

	srv.Stop()
	const deadline = 100 * time.Millisecond
	callOnce := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		_, err := r.client.ShouldRateLimit(ctx, req)
		return time.Since(start), err
	}
	var goroutines []int
	for i := range 200 {
		took, err := callOnce()
		if code := status.Code(err); code != codes.Unavailable {
			t.Fatalf("call %d with Redis down: %v, want Unavailable", i, err)
		}
		if took > deadline+50*time.Millisecond {
			t.Fatalf("call %d with Redis down took %s, over its %s deadline", i, took, deadline)
		}
		if i == 20 || i == 199 {
			goroutines = append(goroutines, numGoroutine())
		}
	}
	if goroutines[1] > goroutines[0]+10 {
		t.Fatalf("goroutines grew from %d to %d over 180 failing calls", goroutines[0], goroutines[1])
	}

	srv.Restart()
	back := time.Now()
	for {
		if _, err := callOnce(); err == nil {
			break
		}
		if time.Since(back) > 5*time.Second {
			t.Fatal("calls still fail 5s after Redis came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(back); took > time.Second {
		t.Fatalf("calls succeeded again %s after Redis came back, want within a second", took)
	} else {
		t.Logf("calls succeed again %s after Redis is back", took.Round(time.Millisecond))
	}
}

func numGoroutine() int { return runtime.NumGoroutine() }
