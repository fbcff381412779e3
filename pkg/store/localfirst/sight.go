package localfirst

import (
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// track returns the entry of bucket b (hash h), made if b was seen in this
// interval or the one before, or nil: a bucket seen once is decided on
// Redis and only noted, by its hash, so that a long tail of keys each seen
// now and then costs this replica no more than exact mode: no entry, no
// allocation. An entry made now has no model yet: its request is decided
// on Redis, whose answer is its model.
func (s *Store) track(sh *shard, h uint64, b limit.Bucket) *entry {
	if e := sh.m[h]; e != nil {
		if e.key != b.Key {
			return nil // another key of that hash holds the place
		}
		if !e.matches(b) {
			e.reload(b)
		}
		return e
	}
	if !sh.sighted(h) {
		return nil
	}
	e, err := s.entry(sh, h, b)
	if err != nil {
		return nil // the table is full: decided on Redis, exactly
	}
	return e
}

// sightSlots is how many hashes of buckets seen once a shard keeps per
// interval: 64 shards of 4096, two intervals' worth, are 4 MiB. A hash
// whose place another took is a bucket taken for unseen: it stays cold a
// little longer, which costs what exact mode costs.
const sightSlots = 4096

// sightings are the hashes of the buckets without an entry seen in this
// interval (recent) and the one before (older), each at a place of its
// hash: a lookup is one read, and forgetting an interval one clear.
type sightings struct {
	recent, older *[sightSlots]uint64
}

func newSightings() sightings {
	return sightings{recent: new([sightSlots]uint64), older: new([sightSlots]uint64)}
}

// sighted reports whether the bucket of hash h was seen in this interval
// or the one before, and notes it as seen in this one.
func (sh *shard) sighted(h uint64) bool {
	h |= 1                         // 0 is an empty place
	i := (h / shards) % sightSlots // its shard took h % shards
	if sh.seen.recent[i] == h || sh.seen.older[i] == h {
		return true
	}
	sh.seen.recent[i] = h
	return false
}

// rotate forgets the buckets seen once two intervals ago and not since.
func (sh *shard) rotate() {
	sh.seen.older, sh.seen.recent = sh.seen.recent, sh.seen.older
	clear(sh.seen.recent[:])
}
