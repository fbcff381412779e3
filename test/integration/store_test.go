package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

// client returns a go-redis client as the service builds it.
func client(t testing.TB, o redis.ClientOptions) goredis.UniversalClient {
	t.Helper()
	c, err := redis.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixes atomic.Int64

// conformance runs the memory store's suite, unchanged, on stores sharing c,
// each subtest under a prefix of its own.
func conformance(t *testing.T, c goredis.UniversalClient, mode redis.Mode, calls calling) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := redis.New(redis.Options{
			Client:      c,
			Mode:        mode,
			Pipeline:    calls.pipeline,
			Batch:       calls.batch,
			Prefix:      fmt.Sprintf("conformance%d:", prefixes.Add(1)),
			CallerClock: true, // the suite decides at fixed instants
		})
		if err != nil {
			t.Fatal(err)
		}
		return s // not closed: it would close c, which the subtests share
	})
}

// calling is how script calls reach Redis: batched into pipelines or not,
// and deciding several requests each or one.
type calling struct {
	pipeline redis.Pipeline
	batch    int
}

// pipelines are the ways script calls reach Redis: each on its own, and
// batched into pipelines, at once or within a window.
var pipelines = map[string]calling{
	"Unbatched": {},
	"Pipelined": {pipeline: redis.DefaultPipeline},
	"Window":    {pipeline: redis.Pipeline{Limit: 16, Window: 200 * time.Microsecond}},
	"Requests":  {pipeline: redis.DefaultPipeline, batch: 32}, // several requests per script call
}

func TestConformanceScriptSingle(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, redis.ClientOptions{URL: srv.URL()})
	for name, p := range pipelines {
		t.Run(name, func(t *testing.T) { conformance(t, c, redis.ScriptMode, p) })
	}
}

func TestConformanceScriptCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	c := client(t, redis.ClientOptions{URL: cluster.URL(), Cluster: true})
	for name, p := range pipelines {
		t.Run(name, func(t *testing.T) { conformance(t, c, redis.ScriptMode, p) })
	}
}

func TestConformanceTransactionsSingle(t *testing.T) {
	srv := redistest.Start(t)
	conformance(t, client(t, redis.ClientOptions{URL: srv.URL()}), redis.TransactionsMode, calling{})
}

func TestConformanceTransactionsCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	conformance(t, client(t, redis.ClientOptions{URL: cluster.URL(), Cluster: true}), redis.TransactionsMode, calling{})
}

// TestSlotsMatchRedis checks the store's slot computation against the
// Cluster's own CLUSTER KEYSLOT, for keys with and without hash tags.
func TestSlotsMatchRedis(t *testing.T) {
	cluster := redistest.StartCluster(t)
	c := cluster.Nodes[0].Client(t)
	for _, k := range []string{"foo", "rls:{api|user=alice}|action=trade", "{}x", "a{b}c{d}", "{", "x}{y}", "ümlaut"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redis.Slot(k); int64(got) != want {
			t.Errorf("slot of %q: store says %d, Redis says %d", k, got, want)
		}
	}
}
