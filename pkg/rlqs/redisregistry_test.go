package rlqs_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs/rlqstest"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// redisReplicas returns a rlqstest.NewRegistry of n stores on one Redis
// and a prefix of their own, on the caller's clock, as replicas share it:
// each a SharedRegistry exchanging at every publish, which the suite's
// fixed instants need (shared_test.go tests the refresh).
func redisReplicas(connect redis.ClientOptions, name string) rlqstest.NewRegistry {
	var subtests atomic.Int64
	return func(t *testing.T, n int) []rlqs.Registry {
		prefix := fmt.Sprintf("%s%d:", name, subtests.Add(1))
		rs := make([]rlqs.Registry, n)
		for i := range rs {
			s, err := redis.New(redis.Options{Connect: &connect, CallerClock: true, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			rs[i] = rlqs.NewSharedRegistry(rlqs.RedisBoard(s), 0, 0)
		}
		return rs
	}
}

// TestRedisRegistry runs the registry suite, which the memory registry
// passes too, on a single Redis and on a Cluster. The Redis store bounds
// the replicas of a level (the store's tests check it).
func TestRedisRegistry(t *testing.T) {
	t.Run("Single", func(t *testing.T) {
		srv := redistest.Start(t)
		rlqstest.Run(t, redisReplicas(redis.ClientOptions{URL: srv.URL()}, "reg"))
	})
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		rlqstest.Run(t, redisReplicas(redis.ClientOptions{URL: cl.URL(), Cluster: true}, "creg"))
	})
}
