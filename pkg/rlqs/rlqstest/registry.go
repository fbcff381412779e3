// Package rlqstest is the conformance suite of RLQS registries
// (rlqs.Registry), for tests only: the in-process MemoryRegistry passes
// it, and so do replicas sharing a board, in process and on the Redis
// store, on a single Redis and on a Cluster. Shares of a level divided
// max-min fair among every replica's subscribers, read back on fixed
// instants; expiry; withdrawal; demands of every value (+Inf, 0, NaN,
// huge); many levels in one call; replicas publishing at once.
package rlqstest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// NewRegistry returns, for one subtest, n registries that share one empty
// set of subscribers, as n replicas of the service do: n stores on one
// Redis and prefix, or one MemoryRegistry n times. They must take the
// time they are given (the Redis store's CallerClock), exchange and
// divide at every publish (a refresh and a division interval of 0); the
// suite registers no cleanup, so newRegistry should.
type NewRegistry func(t *testing.T, n int) []rlqs.Registry

// Run runs the whole suite against the registries newRegistry makes.
func Run(t *testing.T, newRegistry NewRegistry) {
	t.Run("Shares", func(t *testing.T) { testShares(t, newRegistry(t, 1)[0]) })
	t.Run("ReplicasSeeEachOther", func(t *testing.T) { testReplicas(t, newRegistry(t, 2)) })
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, newRegistry(t, 2)) })
	t.Run("Withdraw", func(t *testing.T) { testWithdraw(t, newRegistry(t, 2)) })
	t.Run("Values", func(t *testing.T) { testValues(t, newRegistry(t, 2)) })
	t.Run("ManyLevels", func(t *testing.T) { testManyLevels(t, newRegistry(t, 2)) })
	t.Run("ConcurrentReplicas", func(t *testing.T) { testConcurrent(t, newRegistry(t, 8)) })
}

// T0 is the instant the suite starts from.
var T0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// ttl is how long the suite's entries live, unless a case says otherwise.
const ttl = 10 * time.Second

// rate is the limit of the suite's levels, requests per second.
const rate = 100.0

var inf = math.Inf(1)

// Shares is what a publish answers: each level's shares, by instance.
type Shares = map[string]map[string]float64

// Entry returns an entry of a level of the suite's rate.
func Entry(level, instance string, demand float64, active int64) rlqs.Entry {
	return rlqs.Entry{Level: level, Instance: instance, Rate: rate, Demand: demand, Active: active}
}

// Publish publishes at T0+at, failing the test on error, and returns the
// shares it answered.
func Publish(t *testing.T, r rlqs.Registry, at, ttl time.Duration, es ...rlqs.Entry) Shares {
	t.Helper()
	out, err := PublishErr(r, at, ttl, es...)
	if err != nil {
		t.Fatalf("publish at T0+%v: %v", at, err)
	}
	return out
}

// PublishErr publishes at T0+at, and returns the shares it set and its
// error.
func PublishErr(r rlqs.Registry, at, ttl time.Duration, es ...rlqs.Entry) (Shares, error) {
	es = slices.Clone(es)
	err := r.Publish(context.Background(), T0.Add(at), ttl, es)
	out := Shares{}
	for _, e := range es {
		if out[e.Level] == nil {
			out[e.Level] = map[string]float64{}
		}
		out[e.Level][e.Instance] = e.Share
	}
	return out, err
}

func withdraw(t *testing.T, r rlqs.Registry, instance string, levels ...string) {
	t.Helper()
	if err := r.Withdraw(context.Background(), instance, levels); err != nil {
		t.Fatalf("withdraw %s from %v: %v", instance, levels, err)
	}
}

// Check fails the test unless got has the same levels and instances as
// want, each share within a millionth of a request a second.
func Check(t *testing.T, what string, got, want Shares) {
	t.Helper()
	if g, w := describe(got), describe(want); g != w {
		t.Fatalf("%s:\n got  %s\n want %s", what, g, w)
	}
}

func describe(s Shares) string {
	var b strings.Builder
	for _, level := range slices.Sorted(maps.Keys(s)) {
		fmt.Fprintf(&b, "%s{", level)
		for _, inst := range slices.Sorted(maps.Keys(s[level])) {
			fmt.Fprintf(&b, " %q:%.6f", inst, s[level][inst])
		}
		b.WriteString(" } ")
	}
	return b.String()
}

func testShares(t *testing.T, r rlqs.Registry) {
	const level = "api|u=a"
	// One wanting less than an equal part keeps what it wants; one not
	// measured yet takes the rest.
	Check(t, "first", Publish(t, r, 0, ttl, Entry(level, "a", 10, 100), Entry(level, "b", inf, 0)),
		Shares{level: {"a": 10, "b": 90}})
	// A demand published again replaces the last.
	Check(t, "a wants more", Publish(t, r, time.Second, ttl, Entry(level, "a", 70, 200)), Shares{level: {"a": 50}})
	Check(t, "b reads its part", Publish(t, r, time.Second, ttl, Entry(level, "b", 40, 0)), Shares{level: {"b": 40}})
	Check(t, "a gets what b leaves", Publish(t, r, 2*time.Second, ttl, Entry(level, "a", 70, 200)), Shares{level: {"a": 60}})
	// Latest is the latest activity on the level.
	es := []rlqs.Entry{Entry(level, "b", 40, 50)}
	if err := r.Publish(context.Background(), T0.Add(3*time.Second), ttl, es); err != nil {
		t.Fatal(err)
	}
	if es[0].Latest != 200 {
		t.Fatalf("latest activity %d, want 200 (a's)", es[0].Latest)
	}
	// Levels are divided apart.
	Check(t, "another level", Publish(t, r, 3*time.Second, ttl, Entry("api|u=b", "a", inf, 0)), Shares{"api|u=b": {"a": 100}})
	// Demands together within the rate: each gets its own.
	Check(t, "all fits", Publish(t, r, 4*time.Second, ttl, Entry(level, "a", 30, 0), Entry(level, "b", 20, 0)),
		Shares{level: {"a": 30, "b": 20}})
}

func testReplicas(t *testing.T, rs []rlqs.Registry) {
	const level = "api|u=a"
	Check(t, "replica 1 alone", Publish(t, rs[0], 0, ttl, Entry(level, "a", inf, 10)), Shares{level: {"a": 100}})
	Check(t, "replica 2 sees 1", Publish(t, rs[1], time.Second, ttl, Entry(level, "b", 30, 20)), Shares{level: {"b": 30}})
	Check(t, "replica 1 sees 2", Publish(t, rs[0], 2*time.Second, ttl, Entry(level, "a", inf, 10)), Shares{level: {"a": 70}})
	// Two instances of one replica on one level are two subscribers.
	Check(t, "two of replica 2", Publish(t, rs[1], 3*time.Second, ttl, Entry(level, "b", 30, 20), Entry(level, "c", inf, 0)),
		Shares{level: {"b": 30, "c": 35}})
	Check(t, "replica 1 sees them", Publish(t, rs[0], 4*time.Second, ttl, Entry(level, "a", inf, 10)), Shares{level: {"a": 35}})
}

func testExpiry(t *testing.T, rs []rlqs.Registry) {
	const level = "api|u=a"
	Publish(t, rs[0], 0, ttl, Entry(level, "a", 40, 0))
	Check(t, "within its TTL", Publish(t, rs[1], 5*time.Second, ttl, Entry(level, "b", inf, 0)), Shares{level: {"b": 60}})
	// An entry lives to the end of its TTL, the instant included...
	Check(t, "at its expiry", Publish(t, rs[1], ttl, ttl, Entry(level, "b", inf, 0)), Shares{level: {"b": 60}})
	// ...and not a microsecond more.
	Check(t, "past its expiry", Publish(t, rs[1], ttl+time.Microsecond, ttl, Entry(level, "b", inf, 0)), Shares{level: {"b": 100}})
	Check(t, "published again", Publish(t, rs[0], ttl+2*time.Second, ttl, Entry(level, "a", 40, 0)), Shares{level: {"a": 40}})
	Check(t, "back", Publish(t, rs[1], ttl+3*time.Second, ttl, Entry(level, "b", inf, 0)), Shares{level: {"b": 60}})

	// Each publish has its own TTL.
	const other = "api|u=b"
	Publish(t, rs[0], 0, time.Minute, Entry(other, "long", inf, 0))
	Publish(t, rs[1], 0, time.Second, Entry(other, "short", inf, 0))
	Check(t, "the short one gone", Publish(t, rs[0], 2*time.Second, time.Minute, Entry(other, "long", inf, 0)), Shares{other: {"long": 100}})
	// A TTL already over: the entry counts for the publish that made it,
	// and is gone after.
	Publish(t, rs[0], 3*time.Second, -time.Second, Entry("api|u=c", "x", inf, 0))
	Check(t, "a TTL of 0", Publish(t, rs[1], 4*time.Second, ttl, Entry("api|u=c", "y", inf, 0)), Shares{"api|u=c": {"y": 100}})
}

func testWithdraw(t *testing.T, rs []rlqs.Registry) {
	const l1, l2 = "api|u=a", "api|u=a|x=1"
	Publish(t, rs[0], 0, ttl, Entry(l1, "a", inf, 0), Entry(l2, "a", inf, 0))
	Publish(t, rs[1], 0, ttl, Entry(l1, "b", inf, 0), Entry(l2, "b", inf, 0))
	withdraw(t, rs[0], "a", l1)
	Check(t, "a withdrawn from l1", Publish(t, rs[1], time.Second, ttl, Entry(l1, "b", inf, 0), Entry(l2, "b", inf, 0)),
		Shares{l1: {"b": 100}, l2: {"b": 50}})
	// Withdrawing what is not there, or nothing, is no error.
	withdraw(t, rs[0], "a", l1, "api|u=nobody")
	withdraw(t, rs[1], "nobody", l2)
	withdraw(t, rs[1], "b")
	withdraw(t, rs[1], "b", l1, l2)
	Check(t, "b withdrawn", Publish(t, rs[0], 2*time.Second, ttl, Entry(l2, "a", inf, 0)), Shares{l2: {"a": 100}})
	Check(t, "back", Publish(t, rs[0], 3*time.Second, ttl, Entry(l1, "a", inf, 0)), Shares{l1: {"a": 100}})
}

func testValues(t *testing.T, rs []rlqs.Registry) {
	const level = "api|u=a"
	// Nonsense asks for nothing, yet every subscriber keeps a small part
	// (its idle floor); shares never add up to more than the rate.
	mine := []rlqs.Entry{
		Entry(level, "zero", 0, -1),
		Entry(level, "nan", math.NaN(), 0),
		Entry(level, "negative", -5, math.MinInt64),
		Entry(level, "tiny", math.SmallestNonzeroFloat64, math.MaxInt64),
	}
	theirs := []rlqs.Entry{
		Entry(level, "huge", math.MaxFloat64, 0),
		Entry(level, "unknown", inf, 0),
		Entry(level, "third", 10.0/3, 0),
		Entry(level, "bytes {}|#%\x00\xff é", 6, 2),
	}
	Publish(t, rs[0], 0, ttl, mine...)
	Publish(t, rs[1], 0, ttl, theirs...)
	a := Publish(t, rs[0], time.Second, ttl, mine...)[level]
	b := Publish(t, rs[1], time.Second, ttl, theirs...)[level]
	sum := 0.0
	for inst, s := range a {
		sum += s
		if !(s > 0) || s > rate {
			t.Errorf("%s: share %v", inst, s)
		}
	}
	for inst, s := range b {
		sum += s
		if !(s > 0) || s > rate {
			t.Errorf("%s: share %v", inst, s)
		}
	}
	if sum > rate*(1+1e-9) {
		t.Fatalf("shares add up to %v, more than the rate %v: %v %v", sum, rate, a, b)
	}
	if b["third"] != 10.0/3 || b["bytes {}|#%\x00\xff é"] != 6 || b["huge"] != b["unknown"] || !(b["huge"] > 40) {
		t.Fatalf("shares of the measured %v", b)
	}
	// Levels of every form a bucket key takes: a domain alone, marks,
	// escapes, a wildcard.
	var es []rlqs.Entry
	want := Shares{}
	for _, l := range []string{"api", "api|u=a|#lb2", "api|u=a|#sw1m/1s", "api|u=a|#10/second/fw",
		"api|u=%7Bx%7D|p=%7C", "api|path=/v1*", "other|u=a", "api|u=a|x=1|y=2|z=3"} {
		es = append(es, Entry(l, "i", inf, 0))
		want[l] = map[string]float64{"i": rate}
	}
	Check(t, "levels", Publish(t, rs[0], 2*time.Second, ttl, es...), want)
}

// manyLevels is more levels than one script call takes (256), over many
// hierarchies, so over many Cluster slots.
const manyLevels = 600

func testManyLevels(t *testing.T, rs []rlqs.Registry) {
	var as, bs []rlqs.Entry
	wantA, wantB := Shares{}, Shares{}
	for i := range manyLevels {
		level := fmt.Sprintf("d%d|u=u%d", i%3, i/2)
		if i%2 == 1 {
			level += "|x=1"
		}
		d := float64(10 + i%90) // above any idle floor
		as, bs = append(as, Entry(level, "a", d, int64(i))), append(bs, Entry(level, "b", inf, 0))
		wantA[level] = map[string]float64{"a": min(d, rate/2)}
		wantB[level] = map[string]float64{"b": rate - min(d, rate/2)}
	}
	Publish(t, rs[0], 0, ttl, as...)
	Check(t, "replica 2", Publish(t, rs[1], time.Second, ttl, bs...), wantB)
	Check(t, "replica 1", Publish(t, rs[0], 2*time.Second, ttl, as...), wantA)
}

func testConcurrent(t *testing.T, rs []rlqs.Registry) {
	const levels = 50
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	entries := func(n int) []rlqs.Entry {
		var es []rlqs.Entry
		for l := range levels {
			es = append(es, Entry(fmt.Sprintf("api|u=%d", l), fmt.Sprintf("r%d", n), inf, 0))
		}
		return es
	}
	for n, r := range rs {
		wg.Go(func() {
			for round := range 5 {
				if err := r.Publish(context.Background(), T0.Add(time.Duration(round)*time.Millisecond), ttl, entries(n)); err != nil {
					errs[n] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for n, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", n, err)
		}
	}
	// Every replica sees the others: an equal part each.
	for n, r := range rs {
		for level, shares := range Publish(t, r, time.Second+time.Duration(n)*time.Millisecond, ttl, entries(n)...) {
			if s := shares[fmt.Sprintf("r%d", n)]; math.Abs(s-rate/float64(len(rs))) > 1e-9 {
				t.Fatalf("replica %d, level %s: share %v, want %v", n, level, s, rate/float64(len(rs)))
			}
		}
	}
}
