package rlqs

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// RedisRegistry shares subscribers among replicas through a Redis store:
// its PublishDemands and WithdrawDemands, whose entries are Entry's.
func RedisRegistry(s *redis.Store) Registry { return redisRegistry{s} }

type redisRegistry struct{ s *redis.Store }

func (r redisRegistry) Publish(ctx context.Context, now time.Time, ttl time.Duration, entries []Entry) (map[string][]Entry, error) {
	ds := make([]redis.Demand, len(entries))
	for i, e := range entries {
		ds[i] = redis.Demand(e)
	}
	got, err := r.s.PublishDemands(ctx, now, ttl, ds)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Entry, len(got))
	for level, ds := range got {
		es := make([]Entry, len(ds))
		for i, d := range ds {
			es[i] = Entry(d)
		}
		out[level] = es
	}
	return out, nil
}

func (r redisRegistry) Withdraw(ctx context.Context, instance string, levels []string) error {
	return r.s.WithdrawDemands(ctx, instance, levels)
}
