package rlqs

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// RedisRegistry shares subscribers among replicas through a Redis store:
// a SharedRegistry exchanging each level at most once per DefaultRefresh.
func RedisRegistry(s *redis.Store) *SharedRegistry {
	return NewSharedRegistry(RedisBoard(s), DefaultRefresh)
}

// RedisBoard is a Board on a Redis store: its ExchangeDemands, whose
// demands are Entry's.
func RedisBoard(s *redis.Store) Board { return redisBoard{s} }

type redisBoard struct{ s *redis.Store }

func (r redisBoard) Exchange(ctx context.Context, now time.Time, replica string, shelves []Shelf) (map[string][]Entry, error) {
	rs := make([]redis.Shelf, len(shelves))
	for i, sh := range shelves {
		ds := make([]redis.Demand, len(sh.Entries))
		for j, e := range sh.Entries {
			ds[j] = redis.Demand(e)
		}
		rs[i] = redis.Shelf{Level: sh.Level, TTL: sh.TTL, Demands: ds}
	}
	got, err := r.s.ExchangeDemands(ctx, now, replica, rs)
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
