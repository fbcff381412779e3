package redis

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Regions exchange through every region's store (package region): each
// replica of every region writes its report of each epoch, one value of
// all the buckets it used, as its field ("region/replica") of one hash in
// every region's Redis, and reads back the others' there. The hash is
// one key, in one slot on a Cluster: an exchange is one script call,
// demands.lua's, whatever the buckets.

// regionsKey is the hash of the regions' reports, after the store's
// prefix.
const regionsKey = "{regions}|#reports1"

// ExchangeReport writes report as field's value in the regions' hash,
// valid for ttl from now (the Redis server's clock unless CallerClock),
// and returns every other field's live value. Fields past their expiry
// are deleted as they are met. It needs the script mode.
func (s *Store) ExchangeReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if _, ok := s.exec.(scriptExec); !ok {
		return nil, errors.New("redis store: regions need the script mode")
	}
	key := s.keyPrefix + regionsKey
	c := &demandCall{keys: []string{key}, shelves: []Shelf{{Level: "regions", TTL: ttl, Record: report}}}
	exchangeRun(ctx, s.clientsAt(s.placeOf(key, false)), s.at(now), field, []*demandCall{c})
	if c.err != nil {
		return nil, fmt.Errorf("redis store: exchanging region reports: %w", c.err)
	}
	return c.views[0], nil
}
