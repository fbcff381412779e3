package redis

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Regions exchange through every region's store (package region): each
// replica of every region writes its report of each epoch, one value of
// all the buckets it used, as its field ("region/replica") of one hash in
// every region's Redis, and reads back the others' in its own region's
// (ExchangeReport); what it writes to the other regions' is a post
// (PostReport), which reads nothing back. The hash and its heads' (below)
// are in one slot on a Cluster: an exchange is one round trip, and one
// more to read the reports it does not hold yet, whatever the buckets.
//
// A value is kept as demands.lua keeps a level's records (its expiry, 7
// bytes, then the report), so that replicas of the version before, which
// exchange with demands.lua on the same hash, and these read each other's.
// A report is 40 bytes a bucket: with 100,000 buckets a region, 4 MB.
// Redis spent 145 to 190 ms on a demands.lua call with three (80 to 90 ms
// reading the others into the script), 11 to 13 ms taking one into a
// script only to write it, 1 ms writing one with HSET and 6 reading one
// with HMGET. So these write their value with HSET, its expiry reckoned on
// the Redis server's clock as their last call there found it (the same
// within the call's round trip), and with reports.lua, in the same
// pipeline, its head (the expiry and the report's first 16 bytes: a
// region's report's version and epoch, which tell one from the next) in a
// second hash; a reading call returns the heads, and the caller reads
// with HMGET the values whose heads it has not read: a replica that
// writes its report and reads the others' twice an interval reads each
// once.

var (
	//go:embed reports.lua
	reportsSource string

	reportsScript = newScript(stateSource + reportsSource)
)

// regionsKey is the hash of the regions' reports, after the store's
// prefix, and headsKey the hash of their heads, in the same slot.
const (
	regionsKey = "{regions}|#reports1"
	headsKey   = "{regions}|#heads1"
)

// tagLen is the bytes of a report its head holds.
const tagLen = 16

// heldReport is a report an ExchangeReport read, and its tag: its first
// tagLen bytes.
type heldReport struct {
	tag, report string
}

// tagOf returns the tag of a report.
func tagOf[T string | []byte](report T) string {
	return string(report[:min(len(report), tagLen)])
}

// ExchangeReport writes report as field's value in the regions' hash,
// valid for ttl from now (the Redis server's clock unless CallerClock),
// and returns every other field's live value. It reads only the values
// whose heads it has not read (a replica's next report), and of those
// without heads (a replica of the version before wrote them) all: those
// it finds past their expiry are deleted at its next call, if they still
// are. It needs the script mode. report is not kept past the call.
func (s *Store) ExchangeReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) ([]Posted, error) {
	if err := s.reportsReady(); err != nil {
		return nil, err
	}
	key := s.keyPrefix + regionsKey
	s.reportsMu.Lock()
	expired, held := s.expiredReports, s.heldReports
	s.reportsMu.Unlock()
	c := s.clientsAt(s.placeOf(key, false))
	at, others, err := s.reportCall(ctx, c, now, field, report, ttl, false, expired)
	if err != nil {
		return nil, fmt.Errorf("redis store: exchanging region reports: %w", err)
	}
	// others are fields and their heads, in turn.
	var fetch []string
	for i := 0; i+1 < len(others); i += 2 {
		f, head := others[i], others[i+1]
		if h, ok := held[f]; head == "" || !ok || len(head) < expiryLen || h.tag != head[expiryLen:] {
			fetch = append(fetch, f)
		}
	}
	var got []any
	if len(fetch) > 0 {
		if got, err = c.conn.HMGet(ctx, key, fetch...).Result(); err != nil {
			return nil, fmt.Errorf("redis store: reading region reports: %w", err)
		}
	}
	read := make(map[string]heldReport, len(got))
	expired = nil
	for i, f := range fetch {
		v, ok := got[i].(string)
		switch {
		case !ok: // gone since
		case len(v) < expiryLen || expiryOf(v) < at:
			expired = append(expired, f)
		default:
			read[f] = heldReport{tag: tagOf(v[expiryLen:]), report: v[expiryLen:]}
		}
	}
	out := make([]Posted, 0, len(others)/2)
	next := make(map[string]heldReport, len(others)/2)
	for i := 0; i+1 < len(others); i += 2 {
		f := others[i]
		h, ok := read[f]
		if !ok && !slices.Contains(fetch, f) {
			h, ok = held[f]
		}
		if ok {
			out = append(out, Posted{Replica: f, Record: h.report})
			next[f] = h
		}
	}
	s.reportsMu.Lock()
	s.expiredReports, s.heldReports = expired, next
	s.reportsMu.Unlock()
	return out, nil
}

// PostReport writes report as field's value in the regions' hash, valid
// for ttl from now, as ExchangeReport does, and reads nothing back: what a
// replica sends another region's Redis. It needs the script mode. report
// is not kept past the call.
func (s *Store) PostReport(ctx context.Context, now time.Time, field string, report []byte, ttl time.Duration) error {
	if err := s.reportsReady(); err != nil {
		return err
	}
	key := s.keyPrefix + regionsKey
	if _, _, err := s.reportCall(ctx, s.clientsAt(s.placeOf(key, false)), now, field, report, ttl, true, nil); err != nil {
		return fmt.Errorf("redis store: posting a region report: %w", err)
	}
	return nil
}

// PrepareReports gets the store ready for its first report call: a
// connection to the node of the regions' hash, the server's clock read
// and the script loaded. Over a link of a region's round trip each of
// these is one, and the first exchange would not fit in its time.
func (s *Store) PrepareReports(ctx context.Context) error {
	if err := s.reportsReady(); err != nil {
		return err
	}
	c := s.clientsAt(s.placeOf(s.keyPrefix+regionsKey, false))
	// In one pipeline, as report calls are sent: the connection it opens
	// is the one the first report call finds. The clock read here is off
	// by up to the connection's opening (a round trip or two), against
	// reports' lives of three intervals; each report call reads it again.
	p := c.conn.Pipeline()
	clock := p.Time(ctx)
	load := p.ScriptLoad(ctx, reportsScript.src)
	begin := time.Now()
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("redis store: preparing region reports: %w", err)
	}
	if err := cmp.Or(clock.Err(), load.Err()); err != nil {
		return fmt.Errorf("redis store: preparing region reports: %w", err)
	}
	if !s.serverKnown.Load() {
		s.noteServerTime(clock.Val().UnixMicro(), begin, time.Now())
	}
	return nil
}

func (s *Store) reportsReady() error {
	if s.closed.Load() {
		return errClosed
	}
	if _, ok := s.exec.(scriptExec); !ok {
		return errors.New("redis store: regions need the script mode")
	}
	return nil
}

// expiryOf reads a value's expiry, its first 7 bytes, big-endian.
func expiryOf(v string) int64 {
	var e int64
	for i := range expiryLen {
		e = e<<8 | int64(v[i])
	}
	return e
}

// serverNow returns the time on the Redis server's clock, Unix
// microseconds, as the store's last report call there found it (or, before
// the first, a TIME call), moved on by the time since on this clock.
func (s *Store) serverNow(ctx context.Context, c *clients) (int64, error) {
	if !s.serverKnown.Load() {
		begin := time.Now()
		t, err := c.conn.Time(ctx).Result()
		if err != nil {
			return 0, err
		}
		s.noteServerTime(t.UnixMicro(), begin, time.Now())
	}
	return time.Now().UnixMicro() + s.serverAhead.Load(), nil
}

// noteServerTime notes that the server's clock read at (Unix
// microseconds) in a call from begin to end here.
func (s *Store) noteServerTime(at int64, begin, end time.Time) {
	mid := begin.UnixMicro() + end.Sub(begin).Microseconds()/2
	s.serverAhead.Store(at - mid)
	s.serverKnown.Store(true)
}

// reportCall writes report (none: removes the caller's field) as
// field's value, valid for ttl from now (-1: the server's clock), with a
// plain HSET, then runs reports.lua, in one pipeline on the node of the
// regions' hash. It returns the time the script ran at, and unless post
// the other fields and their heads, in turn. Like runPipelined, it loads
// the script with EVAL where Redis answers NOSCRIPT, sends the calls
// again while Redis answers TRYAGAIN (a Cluster slot moving), and counts
// the round trip on the node's breaker. A report written twice is the
// same report: a call may be sent again.
func (s *Store) reportCall(ctx context.Context, c *clients, now time.Time, field string, report []byte, ttl time.Duration,
	post bool, expired []string) (int64, []string, error) {
	key, heads := s.keyPrefix+regionsKey, s.keyPrefix+headsKey
	keys := []string{key, heads}
	ticket, err := c.allow(ctx, keys)
	if err != nil {
		return 0, nil, err
	}
	begin := time.Now()
	at := s.at(now)
	var value []byte // the caller's value: its expiry, then its report
	expiry := ""
	if len(report) > 0 {
		base := at
		if base < 0 {
			if base, err = s.serverNow(ctx, c); err != nil {
				c.done(ctx, ticket, begin, err)
				return 0, nil, err
			}
		}
		e := min(max(base+ttl.Microseconds(), 0), 1<<53) // as demands.lua bounds it
		expiry = strconv.FormatInt(e, 10)
		// One buffer a store, reused: the value is 4 MB a call.
		s.valueMu.Lock()
		defer s.valueMu.Unlock()
		value = append(s.value[:0], byte(e>>48), byte(e>>40), byte(e>>32), byte(e>>24), byte(e>>16), byte(e>>8), byte(e))
		value = append(value, report...)
		s.value = value
	}
	mode := "read"
	if post {
		mode = "post"
	}
	args := make([]any, 0, 11+len(expired))
	args = append(args, "evalsha", &reportsScript.sha, 2, key, heads, "", field, expiry, tagOf(report),
		strconv.Itoa(MaxDemandReplicas), mode)
	if at >= 0 {
		args[5] = strconv.FormatInt(at, 10)
	}
	for _, f := range expired {
		args = append(args, f)
	}
	var cmd *goredis.SliceCmd
	var sent, back time.Time
	for try := 1; ; try++ {
		p := c.conn.Pipeline()
		var set *goredis.IntCmd
		if value != nil {
			set = p.HSet(ctx, key, field, value)
		}
		cmd = goredis.NewSliceCmd(ctx, args...)
		_ = p.Process(ctx, cmd) // queued; its error is the command's, read below
		sent = time.Now()
		_, _ = p.Exec(ctx)
		back = time.Now()
		err = cmd.Err()
		if set != nil && set.Err() != nil {
			err = set.Err()
		}
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") && args[0] == "evalsha" {
			args[0], args[1] = "eval", &reportsScript.src // loads it
			continue
		}
		// TRYAGAIN: the slot is moving; neither ran.
		if !goredis.IsTryAgainError(err) || try == tryAgainTimes || !sleepCtx(ctx, tryAgainPause) {
			break
		}
	}
	c.done(ctx, ticket, begin, err)
	if err != nil {
		return 0, nil, err
	}
	reply := cmd.Val()
	if len(reply) == 0 || len(reply)%2 != 1 {
		return 0, nil, fmt.Errorf("reports script: a reply of %d values", len(reply))
	}
	ran, ok := reply[0].(int64)
	if !ok {
		return 0, nil, fmt.Errorf("reports script: %v (%T) is not a time", reply[0], reply[0])
	}
	if at < 0 {
		s.noteServerTime(ran, sent, back)
	}
	others := make([]string, len(reply)-1)
	for i, v := range reply[1:] {
		if others[i], ok = v.(string); !ok {
			return 0, nil, fmt.Errorf("reports script: %v (%T) is not a field or head", v, v)
		}
	}
	return ran, others, nil
}
