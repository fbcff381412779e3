package memcached

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// applyMany decides a request of several buckets under their locks.
func (s *Store) applyMany(ctx context.Context, now time.Time, places []place, buckets []limit.Bucket, out []limit.Result) error {
	order := make([]int, len(places))
	for i := range order {
		order[i] = i
	}
	// One order for every request: two never wait for each other.
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(places[a].key, places[b].key) })
	held, locked, err := s.lock(ctx, places, order)
	defer func() { s.unlock(held, locked) }()
	if err != nil {
		return err
	}
	// A write starts only while every lock is sure to outlive it, so that
	// no write lands after a lock expired and another request took it.
	writable := func() error {
		if time.Since(locked) > s.lockHold() {
			return errLocksExpiring
		}
		return nil
	}
	if err := writable(); err != nil {
		return err
	}
	keys := make([]string, len(places))
	for i, p := range places {
		keys[i] = p.key
	}
	states := make([]limit.State, len(buckets))
	written := make([]int, 0, len(buckets))
	for round := 0; ; round++ {
		if round > 0 {
			// A request of one bucket that read before the locks were
			// taken wrote in between: decide again.
			if err := backoff(ctx, round); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		items, err := s.client.GetMulti(keys)
		if err != nil {
			return err
		}
		for i, p := range places {
			states[i] = stateAt(p, buckets[i], items[p.key])
		}
		admitted := limit.DecideAll(states, buckets, now, out)
		written = written[:0]
		failed := false
		for _, i := range order {
			b := buckets[i]
			if b.Hits == 0 || !limit.Saves(b, admitted) {
				continue
			}
			err := writable()
			if err == nil {
				err = s.write(places[i], b, items[places[i].key], out[i], now)
			}
			if conflict(err) {
				failed = true
				break
			}
			if err != nil {
				return errors.Join(err, s.undo(now, places, buckets, items, out, written))
			}
			written = append(written, i)
		}
		if !failed {
			return nil
		}
		if err := s.undo(now, places, buckets, items, out, written); err != nil {
			return err
		}
	}
}

// lock takes the locks of places in order, waiting for each, and returns
// the keys of those it holds (all of them, unless ctx ends or memcached
// fails first) and when the first was asked for: they live at least
// lockLife from then. Locks held so long while waiting for the others
// that they may expire before the writes are let go, and taken anew.
func (s *Store) lock(ctx context.Context, places []place, order []int) ([]string, time.Time, error) {
	token := []byte(strconv.FormatUint(rand.Uint64(), 36))
	for {
		held, since, err := s.tryLock(ctx, places, order, token)
		if !errors.Is(err, errLocksExpiring) {
			return held, since, err
		}
		s.unlock(held, since)
	}
}

func (s *Store) tryLock(ctx context.Context, places []place, order []int, token []byte) (held []string, since time.Time, err error) {
	held = make([]string, 0, len(order))
	for _, i := range order {
		k := lockKey(places[i].key)
		for attempt := 0; ; attempt++ {
			asked := time.Now()
			err := s.client.Add(&memcache.Item{Key: k, Value: token, Expiration: s.lockTTL()})
			if err == nil {
				if len(held) == 0 {
					since = asked
				}
				held = append(held, k)
				break
			}
			if !errors.Is(err, memcache.ErrNotStored) {
				return held, since, err
			}
			if len(held) > 0 && time.Since(since) > s.lockHold() {
				return held, since, errLocksExpiring
			}
			if err := backoff(ctx, attempt+1); err != nil {
				return held, since, err
			}
		}
	}
	return held, since, nil
}

// errLocksExpiring fails a request whose locks took so long to take or
// hold (memcached slow, or contended) that they may expire before its
// writes end: it is not decided, and the failure mode answers.
var errLocksExpiring = errors.New("memcached: a request's bucket locks were held too long to write under them (memcached slow or contended)")

// lockHold is how long after the first lock was asked for a write may
// still start: the locks' shortest life, less one call's timeout.
func (s *Store) lockHold() time.Duration {
	return s.lockLife() - s.client.Timeout
}

// lockLife is the shortest life of a lock.
func (s *Store) lockLife() time.Duration { return time.Duration(s.lockTTL()-1) * time.Second }

// unlock deletes the locks held, whatever the call's context says, while
// they are sure to be this request's still: past their life another may
// hold them, and they expire anyway.
func (s *Store) unlock(held []string, locked time.Time) {
	if time.Since(locked) >= s.lockLife() {
		return
	}
	for _, k := range held {
		if err := s.client.Delete(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			s.log.Debug("memcached: a lock stays until it expires", "err", err)
		}
	}
}

// undo takes back the writes made to the buckets written (under their
// locks): a counter by the difference written (a reference replica may
// have incremented it since), a bucket of its own by its value read (or
// by deleting it, if there was none).
func (s *Store) undo(now time.Time, places []place, buckets []limit.Bucket, items map[string]*memcache.Item, out []limit.Result, written []int) error {
	var errs []error
	for _, i := range written {
		p, b, read := places[i], buckets[i], items[places[i].key]
		var err error
		switch {
		case p.counter:
			delta := max(out[i].State.Counter, 0) - stateAt(p, b, read).Counter
			if delta > 0 {
				_, err = s.client.Decrement(p.key, uint64(delta))
			} else if delta < 0 {
				_, err = s.client.Increment(p.key, uint64(-delta))
			}
		case read == nil:
			err = s.client.Delete(p.key)
		default:
			ttl := limit.Decide(stateAt(p, b, read), b.Limit, now, 0).TTL
			err = s.client.Set(&memcache.Item{Key: p.key, Value: read.Value, Flags: read.Flags, Expiration: expiration(ttl, s.clock())})
		}
		if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			errs = append(errs, fmt.Errorf("taking back a charge of %q: %w", b.Key, err))
		}
	}
	return errors.Join(errs...)
}
