package region

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// RedisBoard is a region's Redis store as a Board (its ExchangeReport)
// and a Poster (its PostReport).
func RedisBoard(s *redis.Store) Board { return redisBoard{s} }

type redisBoard struct{ s *redis.Store }

func (b redisBoard) ExchangeReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	got, err := b.s.ExchangeReport(ctx, now, field, report, ttl)
	if err != nil {
		return nil, err
	}
	out := make([]Posted, len(got))
	for i, p := range got {
		out[i] = Posted{Field: p.Replica, Report: p.Record}
	}
	return out, nil
}

// PostReport writes report as field's, and reads nothing back.
func (b redisBoard) PostReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) error {
	return b.s.PostReport(ctx, now, field, report, ttl)
}

// Prepare gets the store ready for the first exchange.
func (b redisBoard) Prepare(ctx context.Context) error { return b.s.PrepareReports(ctx) }
