package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
)

// The RLQS registry on Redis (package rlqs's Board, adapted in that
// package): each replica keeps, for every level of a limit its Envoys
// subscribe to, one field with its record there (what the other replicas
// need to divide the level's limit: its subscribers as a few groups, of
// bounded size, which only package rlqs reads), and reads back the other
// replicas' fields. A replica exchanges a level at most about once a
// second however many of its Envoys report it (package rlqs's
// SharedRegistry), so the work on Redis grows with levels x replicas, not
// levels x Envoys.
//
// A level is one hash, keyed like its bucket with demandMark after it (so
// on a Cluster it shares its bucket's slot, and a hierarchy's levels one
// call): field the replica, value its expiry (7 bytes, written by
// demands.lua on the clock the store decides on), then the record. The
// hash expires a second after its latest field, so a level no one
// publishes on again goes away.

var (
	//go:embed demands.lua
	demandsSource string

	demandsScript = newScript(stateSource + demandsSource)
)

// Shelf is one replica's record of one level: the value of its field in
// the level's hash.
type Shelf struct {
	// Level is the level's bucket key.
	Level string
	// TTL is how long the field lives unless written again; 0 or less, it
	// is gone at once.
	TTL time.Duration
	// Record is the replica's record there; empty removes its field.
	Record []byte
}

// Posted is another replica's record of a level, as an exchange reads it.
type Posted struct {
	// Replica names the replica: its field in the level's hash.
	Replica string
	// Record is its record there.
	Record string
}

// MaxDemandReplicas is the most fields (replicas) a level keeps: past it,
// an exchange drops those expiring soonest (the replicas that have gone
// longest without writing; ties, the first by their bytes). It bounds what
// a level costs every exchange that reads it; 1,000 replicas serving one
// level is far beyond a fleet's.
const MaxDemandReplicas = 1000

// demandMark ends the Redis key of a level's hash. A bucket key has '#'
// only in its marks ("|#lb2", "|#sw1m/1s", "|#fw1m", "|#10/second"), none
// of which is "rlqs", so no bucket's Redis key is a demand key. The 2 is
// the records' form: replicas of the form before (every subscriber's
// entry, "|#rlqs") keep to their own hashes while a rollout replaces
// them.
const demandMark = "|#rlqs2"

// demandKey returns the Redis key of a level's hash.
func demandKey(prefix, level string) string {
	return redisKey(prefix, level) + demandMark
}

// expiryLen is the bytes of a value's expiry, before its shelf.
const expiryLen = 7

// maxCallBytes bounds the bytes of values one exchange call reads, as
// maxCallBuckets bounds its levels: demands.lua starts no level once it
// has read that many, and the levels left go in the next round trip. A
// call's time on Redis grows with the fields it meets and the bytes it
// copies into its reply: a record is at most about 2 KiB, so 256 levels
// of 4 replicas of the largest records is 2 MiB, read in a few calls.
const maxCallBytes = 512 << 10

// demandCall is the script calls of an exchange for at most
// maxCallBuckets levels of one slot: one, unless the levels read more
// than maxCallBytes; then one more per round trip for the levels left.
type demandCall struct {
	call    scriptCall // the call of this round: the levels from next on
	keys    []string
	shelves []Shelf
	views   [][]Posted // each level's other replicas' records, from the replies
	next    int        // the first level not answered yet
	err     error
}

// ExchangeRecords writes each shelf as replica's field on its level, valid
// for the shelf's TTL from now (an empty shelf removes the field), and
// returns for each level the records of the other replicas' fields not
// past their expiry, with the replicas' names. Fields found expired are deleted. now counts only
// with CallerClock; otherwise the Redis server's clock decides, as it does
// for buckets.
//
// The levels go in script calls of at most maxCallBuckets levels of one
// slot, and a slot's calls in one pipeline: an exchange is one round trip
// on a single Redis however many levels it has, while Redis serves others
// between two calls; but for levels of many replicas, which
// take one more round trip per maxCallBytes a call reads. On a Cluster the
// slots go in parallel. It needs the script mode.
func (s *Store) ExchangeRecords(ctx context.Context, now time.Time, replica string, shelves []Shelf) (map[string][]Posted, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if _, ok := s.exec.(scriptExec); !ok {
		return nil, errors.New("redis store: RLQS demands need the script mode")
	}
	out := make(map[string][]Posted, len(shelves))
	if len(shelves) == 0 {
		return out, nil
	}
	keys := make([]string, len(shelves))
	for i, sh := range shelves {
		keys[i] = demandKey(s.keyPrefix, sh.Level)
	}
	// On the first Redis: demands are no limit's buckets.
	where := s.places(keys, func(int) bool { return false })
	runs, _ := cut(where, func(int) int { return 1 }, func(c *demandCall, i int) {
		c.keys = append(c.keys, keys[i])
		c.shelves = append(c.shelves, shelves[i])
	})
	cs := s.clientsAt(0)
	parallel(runs, func(run []*demandCall) { exchangeRun(ctx, cs, s.at(now), replica, run) })
	var first error
	failed, calls := 0, 0
	for _, run := range runs {
		for _, c := range run {
			calls++
			if c.err != nil {
				if failed++; first == nil {
					first = c.err
				}
				continue
			}
			for i, sh := range c.shelves {
				out[sh.Level] = c.views[i]
			}
		}
	}
	if first != nil {
		return nil, fmt.Errorf("redis store: exchanging RLQS demands: %d of %d calls failed, the first: %w", failed, calls, first)
	}
	return out, nil
}

// exchangeRun sends the calls of one slot, in one pipeline, then what
// levels they left in another, until every level is answered or a call
// fails (the exchange fails then: the rest is not sent).
func exchangeRun(ctx context.Context, cs *clients, at int64, replica string, run []*demandCall) {
	for _, c := range run {
		c.views = make([][]Posted, len(c.shelves))
	}
	pending := run
	for len(pending) > 0 {
		calls := make([]*scriptCall, len(pending))
		for i, c := range pending {
			c.call = scriptCall{keys: c.keys[c.next:], args: demandArgs(at, replica, c.shelves[c.next:])}
			calls[i] = &c.call
		}
		runPipelined(ctx, cs, &demandsScript, calls)
		var left []*demandCall
		failed := false
		for _, c := range pending {
			c.err = c.call.err
			if c.err == nil {
				var done int
				done, c.err = demandsReply(c.call.reply, c.shelves[c.next:], c.views[c.next:])
				c.next += done
			}
			switch {
			case c.err != nil:
				failed = true
			case c.next < len(c.shelves):
				left = append(left, c)
			}
		}
		if failed {
			return
		}
		pending = left
	}
}

// demandArgs returns demands.lua's arguments for the shelves of a call, in
// one allocation: the time (empty for the server's), the replica, the most
// fields a level keeps and the most bytes a call reads, then per level the
// shelf's TTL in microseconds and its record.
func demandArgs(at int64, replica string, shelves []Shelf) []string {
	n, size := 4+2*len(shelves), 64+len(replica)
	for _, sh := range shelves {
		size += 24 + len(sh.Record)
	}
	text, ends := make([]byte, 0, size), make([]int, 0, n)
	text, ends = appendTime(text, ends, at)
	text = append(text, replica...)
	ends = append(ends, len(text))
	text, ends = appendArg(text, ends, MaxDemandReplicas)
	text, ends = appendArg(text, ends, maxCallBytes)
	for _, sh := range shelves {
		text, ends = appendArg(text, ends, sh.TTL.Microseconds())
		text = append(text, sh.Record...)
		ends = append(ends, len(text))
	}
	return argStrings(text, ends)
}

// demandsReply reads demands.lua's reply for shelves into views: per
// level answered, a count, then each other replica's field and value;
// last, the number of levels answered, which it returns; each value's
// expiry, which the script has checked, is cut off. Nothing in it is
// trusted: a reply of another shape is an error that says what was wrong.
func demandsReply(reply []any, shelves []Shelf, views [][]Posted) (int, error) {
	if len(reply) == 0 {
		return 0, errors.New("redis demands script: an empty reply")
	}
	done, ok := reply[len(reply)-1].(int64)
	if !ok || done < 1 || done > int64(len(shelves)) {
		return 0, fmt.Errorf("redis demands script: %v (%T) is not a number of levels answered, of %d", reply[len(reply)-1], reply[len(reply)-1], len(shelves))
	}
	reply = reply[:len(reply)-1]
	pos := 0
	for i, sh := range shelves[:done] {
		level := sh.Level
		if pos >= len(reply) {
			return 0, fmt.Errorf("redis demands script: the reply ends before level %q", level)
		}
		n, ok := reply[pos].(int64)
		if !ok || n < 0 || n > int64(len(reply)-pos-1)/2 {
			return 0, fmt.Errorf("redis demands script: level %q: %v (%T) is not a count of the fields that follow", level, reply[pos], reply[pos])
		}
		pos++
		views[i] = nil
		for j := range n {
			replica, ok1 := reply[pos].(string)
			value, ok2 := reply[pos+1].(string)
			if !ok1 || !ok2 {
				return 0, fmt.Errorf("redis demands script: level %q, field %d: a %T and a %T, not a replica and a value", level, j, reply[pos], reply[pos+1])
			}
			if len(value) < expiryLen {
				return 0, fmt.Errorf("redis demands script: level %q, replica %q: a value of %d bytes, shorter than its expiry", level, replica, len(value))
			}
			views[i] = append(views[i], Posted{Replica: replica, Record: value[expiryLen:]})
			pos += 2
		}
	}
	if pos != len(reply) {
		return 0, fmt.Errorf("redis demands script: %d values left over after %d levels", len(reply)-pos, done)
	}
	return int(done), nil
}
