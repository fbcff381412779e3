package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The RLQS registry on Redis (package rlqs's Registry, adapted in cmd):
// each replica publishes, for every level of a limit its Envoys subscribe
// to, one entry per subscriber with its demand, and reads back every live
// entry of the level from all replicas, to divide the level's limit.
//
// A level is one hash, keyed like its bucket with demandMark after it (so
// on a Cluster it shares its bucket's slot, and a hierarchy's levels one
// call): field the instance, value its expiry (7 bytes, written by
// demands.lua on the clock the store decides on), then its demand (the
// float64's 8 bytes, so +Inf and every other value round-trip exactly) and
// its activity (8 bytes), big-endian. The hash expires a second after its
// latest entry, so a level no one publishes on again goes away.

var (
	//go:embed demands.lua
	demandsSource string

	demandsScript = newScript(stateSource + demandsSource)
)

// Demand is one subscriber's demand on one level (rlqs.Entry, which this
// package cannot import: cmd adapts one to the other).
type Demand struct {
	// Level is the level's bucket key.
	Level string
	// Instance names the subscriber, uniquely across replicas.
	Instance string
	// Demand is requests per second; +Inf while not known yet.
	Demand float64
	// Active is when it last reported a request, Unix microseconds; 0 for
	// never.
	Active int64
}

// MaxDemandsPerLevel is the most entries a level keeps: past it, a publish
// drops those expiring soonest (the subscribers that have gone longest
// without publishing; ties, the first instances by their bytes), so an
// entry just published goes only if that many others expire as late. It
// bounds what a level costs every publish that reads it; 1,000
// subscribers of one level is far beyond a fleet's Envoys and replicas.
const MaxDemandsPerLevel = 1000

// demandMark ends the Redis key of a level's hash. A bucket key has '#'
// only in its marks ("|#lb2", "|#sw1m/1s", "|#fw1m", "|#10/second"), none
// of which is "rlqs", so no bucket's Redis key is a demand key.
const demandMark = "|#rlqs"

// demandKey returns the Redis key of a level's hash.
func demandKey(prefix, level string) string {
	return redisKey(prefix, level) + demandMark
}

// demandValueLen is the bytes of a stored value: expiry, demand, activity.
const (
	expiryLen      = 7
	demandValueLen = expiryLen + 16
)

// maxCallEntries bounds the entries one publish call reads, as
// maxCallBuckets bounds its levels: demands.lua starts no level once it
// has read that many, and the levels left go in the next round trip. On
// a busy 2-CPU machine a call of 256 levels of 2 entries held Redis 1.1
// to 1.8 ms, and calls of 5 levels of 1,000 entries (the most a call
// then reads: 4,096 and the level begun) 3.8 to 5 ms, where one call of
// 256 such levels would have held it 120 to 250 ms. A report of a few
// hundred levels of up to 16 subscribers each is still one round trip.
const maxCallEntries = 4096

// demandCall is the script calls of a publish for at most maxCallBuckets
// levels of one slot: one, unless the levels read more than
// maxCallEntries; then one more per round trip for the levels left.
type demandCall struct {
	call    scriptCall // the call of this round: the levels from next on
	keys    []string
	levels  []string
	demands [][]Demand // the entries published on each level
	views   [][]Demand // each level's live entries, from the replies
	next    int        // the first level not answered yet
	err     error
}

// PublishDemands records ds, each valid until now+ttl, and returns for
// each level of ds every entry of that level not past its expiry, from
// all replicas (those just published included). Entries found expired are
// deleted. now counts only with CallerClock; otherwise the Redis server's
// clock decides, as it does for buckets.
//
// The levels go in script calls of at most maxCallBuckets levels of one
// slot, and a slot's calls in one pipeline: a publish is one round trip
// on a single Redis however many levels it has, while Redis serves others
// between two calls; but for levels of many subscribers, which take one
// more round trip per maxCallEntries entries a call reads. On a Cluster
// the slots go in parallel. It needs the script mode.
func (s *Store) PublishDemands(ctx context.Context, now time.Time, ttl time.Duration, ds []Demand) (map[string][]Demand, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if _, ok := s.exec.(scriptExec); !ok {
		return nil, errors.New("redis store: RLQS demands need the script mode")
	}
	out := make(map[string][]Demand, len(ds))
	if len(ds) == 0 {
		return out, nil
	}
	var levels []string
	byLevel := make(map[string][]Demand, len(ds))
	for _, d := range ds {
		if _, seen := byLevel[d.Level]; !seen {
			levels = append(levels, d.Level)
		}
		byLevel[d.Level] = append(byLevel[d.Level], d)
	}
	keys := make([]string, len(levels))
	for i, l := range levels {
		keys[i] = demandKey(s.keyPrefix, l)
	}
	runs := cut(s.cluster, keys, func(int) int { return 1 }, func(c *demandCall, i int) {
		c.keys = append(c.keys, keys[i])
		c.levels = append(c.levels, levels[i])
		c.demands = append(c.demands, byLevel[levels[i]])
	})
	cs := s.client.Load()
	parallel(runs, func(run []*demandCall) { publishRun(ctx, cs, s.at(now), ttl.Microseconds(), run) })
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
			for i, l := range c.levels {
				out[l] = c.views[i]
			}
		}
	}
	if first != nil {
		return nil, fmt.Errorf("redis store: publishing RLQS demands: %d of %d calls failed, the first: %w", failed, calls, first)
	}
	return out, nil
}

// publishRun sends the calls of one slot, in one pipeline, then what
// levels they left in another, until every level is answered or a call
// fails (the publish fails then: the rest is not sent).
func publishRun(ctx context.Context, cs *clients, at, ttl int64, run []*demandCall) {
	for _, c := range run {
		c.views = make([][]Demand, len(c.levels))
	}
	pending := run
	for len(pending) > 0 {
		calls := make([]*scriptCall, len(pending))
		for i, c := range pending {
			c.call = scriptCall{keys: c.keys[c.next:], args: demandArgs(at, ttl, c.demands[c.next:])}
			calls[i] = &c.call
		}
		runPipelined(ctx, cs, &demandsScript, calls)
		var left []*demandCall
		failed := false
		for _, c := range pending {
			c.err = c.call.err
			if c.err == nil {
				var done int
				done, c.err = demandsReply(c.call.reply, c.levels[c.next:], c.views[c.next:])
				c.next += done
			}
			switch {
			case c.err != nil:
				failed = true
			case c.next < len(c.levels):
				left = append(left, c)
			}
		}
		if failed {
			return
		}
		pending = left
	}
}

// demandArgs returns demands.lua's arguments for the entries of each
// level of a call, in one allocation: the time (empty for the server's),
// the TTL, the most entries a level keeps and the most a call reads, then
// per level its number of entries, and each one's instance and encoded
// demand.
func demandArgs(at, ttl int64, demands [][]Demand) []string {
	n, size := 4, 64
	for _, ds := range demands {
		n += 1 + 2*len(ds)
		size += 4
		for _, d := range ds {
			size += len(d.Instance) + 16
		}
	}
	text, ends := make([]byte, 0, size), make([]int, 0, n)
	text, ends = appendTime(text, ends, at)
	text, ends = appendArg(text, ends, ttl)
	text, ends = appendArg(text, ends, MaxDemandsPerLevel)
	text, ends = appendArg(text, ends, maxCallEntries)
	for _, ds := range demands {
		text, ends = appendArg(text, ends, int64(len(ds)))
		for _, d := range ds {
			text = append(text, d.Instance...)
			ends = append(ends, len(text))
			text = binary.BigEndian.AppendUint64(text, math.Float64bits(d.Demand))
			text = binary.BigEndian.AppendUint64(text, uint64(d.Active))
			ends = append(ends, len(text))
		}
	}
	return argStrings(text, ends)
}

// demandsReply reads demands.lua's reply for levels into views: per
// level answered, a count, then each entry's instance and stored value;
// last, the number of levels answered, which it returns. Nothing in it is
// trusted: a reply of another shape is an error that says what was wrong.
func demandsReply(reply []any, levels []string, views [][]Demand) (int, error) {
	if len(reply) == 0 {
		return 0, errors.New("redis demands script: an empty reply")
	}
	done, ok := reply[len(reply)-1].(int64)
	if !ok || done < 1 || done > int64(len(levels)) {
		return 0, fmt.Errorf("redis demands script: %v (%T) is not a number of levels answered, of %d", reply[len(reply)-1], reply[len(reply)-1], len(levels))
	}
	reply = reply[:len(reply)-1]
	pos := 0
	for i, level := range levels[:done] {
		if pos >= len(reply) {
			return 0, fmt.Errorf("redis demands script: the reply ends before level %q", level)
		}
		n, ok := reply[pos].(int64)
		if !ok || n < 0 || n > int64(len(reply)-pos-1)/2 {
			return 0, fmt.Errorf("redis demands script: level %q: %v (%T) is not a count of the entries that follow", level, reply[pos], reply[pos])
		}
		pos++
		views[i] = nil
		if n > 0 {
			views[i] = make([]Demand, n)
		}
		for j := range views[i] {
			instance, ok1 := reply[pos].(string)
			value, ok2 := reply[pos+1].(string)
			if !ok1 || !ok2 {
				return 0, fmt.Errorf("redis demands script: level %q, entry %d: a %T and a %T, not an instance and a value", level, j, reply[pos], reply[pos+1])
			}
			d, err := decodeDemand(level, instance, value)
			if err != nil {
				return 0, err
			}
			views[i][j] = d
			pos += 2
		}
	}
	if pos != len(reply) {
		return 0, fmt.Errorf("redis demands script: %d values left over after %d levels", len(reply)-pos, done)
	}
	return int(done), nil
}

// decodeDemand reads a stored value: its expiry, which the script has
// checked, then the demand and activity.
func decodeDemand(level, instance, value string) (Demand, error) {
	if len(value) != demandValueLen {
		return Demand{}, fmt.Errorf("redis demands script: level %q, instance %q: a value of %d bytes, not %d", level, instance, len(value), demandValueLen)
	}
	b := []byte(value[expiryLen:])
	return Demand{
		Level:    level,
		Instance: instance,
		Demand:   math.Float64frombits(binary.BigEndian.Uint64(b)),
		Active:   int64(binary.BigEndian.Uint64(b[8:])),
	}, nil
}

// WithdrawDemands removes instance's entries on levels (a stream that
// closed), so that their shares go to the others at once. Each level is
// one HDEL, all in one pipeline: one round trip on a single Redis, one per
// node on a Cluster, and Redis serves others between two of them.
func (s *Store) WithdrawDemands(ctx context.Context, instance string, levels []string) error {
	if s.closed.Load() {
		return errClosed
	}
	if len(levels) == 0 {
		return nil
	}
	_, err := s.client.Load().conn.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, l := range levels {
			p.HDel(ctx, demandKey(s.keyPrefix, l), instance)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis store: withdrawing the RLQS demands of %q on %d levels: %w", instance, len(levels), err)
	}
	return nil
}
