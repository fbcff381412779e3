package rlqs

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// RedisRegistry shares subscribers among replicas through a Redis store:
// a SharedRegistry exchanging each level at most once per DefaultRefresh.
func RedisRegistry(s *redis.Store) *SharedRegistry {
	return NewSharedRegistry(RedisBoard(s), DefaultRefresh, DefaultDivideEvery)
}

// RedisBoard is a Board on a Redis store: its ExchangeRecords, of records
// encoded here.
func RedisBoard(s *redis.Store) Board { return redisBoard{s} }

type redisBoard struct{ s *redis.Store }

func (r redisBoard) Exchange(ctx context.Context, now time.Time, replica string, shelves []Shelf) (map[string][]Record, error) {
	rs := make([]redis.Shelf, len(shelves))
	var buf []byte
	for i, sh := range shelves {
		rs[i] = redis.Shelf{Level: sh.Level, TTL: sh.TTL}
		if sh.Record != nil {
			start := len(buf)
			buf = appendRecord(buf, sh.Record)
			rs[i].Record = buf[start:len(buf):len(buf)]
		}
	}
	got, err := r.s.ExchangeRecords(ctx, now, replica, rs)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Record, len(got))
	for level, values := range got {
		recs := make([]Record, len(values))
		for i, v := range values {
			if recs[i], err = parseRecord(v.Record); err != nil {
				return nil, fmt.Errorf("redis store: level %q: replica %q's record: %w", level, clip(v.Replica), err)
			}
			recs[i].Replica = v.Replica
		}
		out[level] = recs
	}
	return out, nil
}
