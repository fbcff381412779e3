package localfirst

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// track returns the entry of bucket b (hash h), made (fresh) if b was seen
// in this interval or the one before, or nil: a bucket seen once is
// decided on Redis and only noted, by its hash, so that a long tail of
// keys each seen now and then costs this replica no more than exact mode:
// no entry, no allocation.
func (s *Store) track(sh *shard, h uint64, b limit.Bucket) (*entry, sighting) {
	if e := sh.m[h]; e != nil {
		if e.key != b.Key {
			return nil, untracked // another key of that hash holds the place
		}
		if e.limit != b.Limit {
			e.reload(b.Limit)
		}
		return e, known
	}
	if !sh.sighted(h) {
		return nil, unseen
	}
	e, err := s.entry(sh, h, b)
	if err != nil {
		return nil, untracked // the table is full: decided on Redis, exactly
	}
	return e, fresh
}

// sighting is what track found of a bucket.
type sighting int

const (
	known     sighting = iota // an entry
	fresh                     // an entry, made now: the bucket's second sighting
	unseen                    // no entry: not seen for two intervals
	untracked                 // no entry: the table is full
)

// trustRatio is how many times a request's hits a limit must allow for
// the request to be admitted on trust, on its bucket's first sighting:
// what that may admit past the limit is then at most a hundredth of it
// per replica, each time the bucket is found anew while full.
const trustRatio = 100

// trusts reports whether bucket b may be admitted on trust on its first
// sighting: not a quota (shadow) bucket, whose figures must be Redis's,
// and a limit of at least trustRatio times its hits.
func trusts(b limit.Bucket) bool {
	size := b.Limit.Size
	return !b.Shadow && b.Hits > 0 && b.Hits <= size/trustRatio
}

// trust admits trusted bucket i of r, as an empty bucket would, and, if
// the request is admitted (or the limit charges always), queues its hits
// for the next sync to charge on Redis, past the limit if need be.
func (s *Store) trust(r *request, i int, rnow int64, charged bool) limit.Result {
	b := r.buckets[i]
	if !charged {
		return limit.Decide(limit.State{}, b.Limit, time.UnixMicro(rnow), 0)
	}
	sh := &s.shards[r.hashes[i]%shards]
	sh.owed = append(sh.owed, owing{key: b.Key, limit: b.Limit, hits: b.Hits, at: rnow})
	return limit.Decide(limit.State{}, b.Limit, time.UnixMicro(rnow), b.Hits)
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
