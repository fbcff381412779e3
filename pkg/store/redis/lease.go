package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Lease is one bucket of a Store.Lease call: what a replica that decides
// locally gives back and asks for, and what it gets.
type Lease struct {
	Key   string
	Limit limit.Limit
	// SecondUnit is the bucket's limit.Bucket.SecondUnit: where it lives.
	SecondUnit bool
	// Return is the units granted before and not used, given back; At is
	// the Unix time in microseconds they were granted at (a window takes
	// them from the (sub-)window they were charged to).
	Return, At int64
	// Ask is the units wanted.
	Ask int64

	// Granted is set by Lease: the units granted, at most Ask.
	Granted int64
	// Now is set by Lease: the time Redis decided at, Unix microseconds.
	Now int64
	// Wait is set by Lease: how long until the bucket has room for one
	// more unit; 0 if it has.
	Wait time.Duration
	// State is set by Lease: the bucket afterwards. A window's Counter is
	// its count at the time decided at, and its Timestamp the start of its
	// current (sub-)window; its Counts are not returned.
	State limit.State
	// Err is set by Lease when the call for this bucket's slot failed;
	// nothing is granted then, and what it gave back may or may not have
	// been taken.
	Err error
}

// leaseFields is the number of values lease.lua returns per bucket.
const leaseFields = 4

// LeaseAll runs limit.Lease on every bucket of leases, on Redis, each
// bucket on its own (a bucket's grant does not depend on another's), in
// calls of at most maxCallBuckets buckets of one hash slot: a sync of many
// buckets holds Redis for a call's few milliseconds at a time, not for
// all of them. A slot's calls go one after another, as a request's parts
// do (decideRun: they share a node, where parallel calls only queue
// together), and the slots in parallel. It returns the time Redis decided
// at (Unix microseconds; the latest, if several calls; each lease has its
// own server's), and the first
// error of a call, whose buckets have their Err set.
//
// It needs the script mode.
func (s *Store) LeaseAll(ctx context.Context, now time.Time, leases []Lease) (int64, error) {
	w := s.when(now)
	rnow, _, err := s.leaseParts(leases, func(p *leasePart) {
		index := indexes(len(p.leases))
		vals, err := runScript(ctx, s.clientsAt(p.at), &leaseScript, p.keys, leaseArgs(w.at, w.ref, p.leases, index))
		if err == nil {
			err = readLeases(vals, p.leases, index)
		}
		p.err = err
	})
	return rnow, err
}

// leasePart is the leases of one call: at one place, of at most
// maxCallBuckets.
type leasePart struct {
	at     place
	index  []int // each lease's place in the caller's
	keys   []string
	leases []Lease // copies, answered by the call
	weight int
	sent   time.Time // when the call was sent, if known
	err    error
}

// leaseParts cuts leases into parts (cut), has run answer each, a place's
// parts in turn and the places in parallel, and copies the answers back:
// a failed part's leases get its error. It returns the latest time Redis
// decided at, when the last call was sent, and the first error.
func (s *Store) leaseParts(leases []Lease, run func(p *leasePart)) (int64, time.Time, error) {
	if _, ok := s.exec.(scriptExec); !ok {
		return 0, time.Time{}, errors.New("redis store: leases need the script mode")
	}
	keys := make([]string, len(leases))
	for i := range leases {
		keys[i] = redisKey(s.keyPrefix, leases[i].Key)
	}
	where := s.places(keys, func(i int) bool { return leases[i].SecondUnit })
	runs, places := cut(where, func(i int) int { return callWeight(leases[i].Limit) }, func(p *leasePart, i int) {
		p.index = append(p.index, i)
		p.keys = append(p.keys, keys[i])
		p.leases = append(p.leases, leases[i])
		p.weight += callWeight(leases[i].Limit)
	})
	for r, run := range runs {
		for _, p := range run {
			p.at = places[r]
		}
	}
	inTurn(runs, run)
	var latest int64
	var sent time.Time
	var first error
	for _, run := range runs {
		for _, p := range run {
			for j, i := range p.index {
				leases[i] = p.leases[j]
				if p.err != nil && leases[i].Err == nil {
					leases[i].Granted, leases[i].Err = 0, p.err
				}
				if leases[i].Err == nil {
					latest = max(latest, leases[i].Now)
				}
			}
			if p.err != nil && first == nil {
				first = p.err
			}
			if p.sent.After(sent) {
				sent = p.sent
			}
		}
	}
	return latest, sent, first
}

// readLeases reads lease.lua's reply vals to the leases index names into
// them.
func readLeases(vals []int64, leases []Lease, index []int) error {
	if len(vals) != leaseFields*len(index)+1 {
		return fmt.Errorf("redis lease script: %d values for %d buckets", len(vals), len(index))
	}
	now := vals[len(vals)-1]
	for j, i := range index {
		v := vals[leaseFields*j:]
		leases[i].Granted = v[0]
		leases[i].State = limit.State{Counter: v[1], Timestamp: v[2]}
		leases[i].Wait = micros(v[3])
		leases[i].Now = now
	}
	return nil
}

// leaseArgs returns the arguments of lease.lua for the leases index
// names: the time; each distinct limit once, its algorithm and parameters
// (params, a calendar window's periods around the service's clock ref);
// then per bucket its limit's index (from 1), the units given back, the
// time they were granted at (0 if none are; a calendar window's, the
// start of the period they were granted in) and the units asked for. A
// sync's buckets share a few limits: Redis parses each once.
func leaseArgs(at, ref int64, leases []Lease, index []int) []string {
	limits := make([]scriptLimit, 0, 8)
	which := make([]int, len(index))
	for j, i := range index {
		b := limit.Bucket{Limit: leases[i].Limit}
		k := findLimit(limits, b, ref)
		if k < 0 {
			k = len(limits)
			limits = append(limits, scriptLimitOf(b, ref))
		}
		which[j] = k
	}
	a := newScriptArgs(2 + 6*len(limits) + 4*len(index))
	a.now(at)
	a.int(int64(len(limits)))
	for _, l := range limits {
		a.int(scriptAlgorithm(l.of))
		for _, v := range l.p[:l.n] {
			a.int(v)
		}
	}
	for j, i := range index {
		l := &leases[i]
		a.int(int64(which[j] + 1))
		a.int(l.Return)
		switch {
		case l.Return <= 0:
			a.int(0)
		case l.Limit.IsCalendar():
			a.int(l.Limit.FixedPeriod(l.At).Start)
		default:
			a.int(l.At)
		}
		a.int(l.Ask)
	}
	return a.strings()
}

// LeaseBatched is LeaseAll for a few buckets, such as one request's: each
// place's part goes in the next call the store's batcher makes to that
// place, beside the requests it decides and other such parts, in one round
// trip (runTogether), where the batcher waits for more (Options.BatchWait).
// It also returns when the (last) call was sent. The time Redis decided at
// is 0 where the store decides at the caller's clock: a call is decided at
// the latest of its parts' instants, perhaps another caller's (each
// lease's Now is the call's). Without a batcher or its wait, it is
// LeaseAll.
func (s *Store) LeaseBatched(ctx context.Context, now time.Time, leases []Lease) (int64, time.Time, error) {
	var rnow int64
	var sent time.Time
	var err error
	if s.batch == nil || s.batch.wait == 0 {
		// Nothing batched, or calls that go at once (a Cluster's: its
		// buckets spread over the slots): a lease call queued behind a
		// slot's call out would only wait for it.
		sent = time.Now()
		rnow, err = s.LeaseAll(ctx, now, leases)
	} else {
		w := s.when(now)
		rnow, sent, err = s.leaseParts(leases, func(p *leasePart) {
			p.sent, p.err = s.batch.submitLeases(ctx, p.at, p.weight, w, p.keys, p.leases)
		})
	}
	if s.callerClock {
		rnow = 0
	}
	return rnow, sent, err
}
