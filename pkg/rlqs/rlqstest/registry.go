// Package rlqstest is the conformance suite of RLQS registries
// (rlqs.Registry), for tests only: the in-process MemoryRegistry passes
// it, and so does the Redis store's, through an adapter, on a single
// Redis and on a Cluster. Publish and read back, replicas that see each
// other, expiry on fixed instants, withdrawal, values that must round-trip
// exactly (+Inf), many levels in one call, and the cap on a level's
// entries where the registry has one.
package rlqstest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// NewRegistry returns, for one subtest, n registries that share one empty
// set of entries, as n replicas of the service do: n stores on one Redis
// and prefix, or one MemoryRegistry n times. They must take the time they
// are given (the Redis store's CallerClock); the suite registers no
// cleanup, so newRegistry should.
type NewRegistry func(t *testing.T, n int) []rlqs.Registry

// Options say what the registry under test bounds.
type Options struct {
	// Cap is the most entries a level keeps, 0 for no limit: past it, a
	// publish drops those expiring soonest, and among those that expire
	// at the same instant the first instances by their bytes.
	Cap int
}

// Run runs the whole suite against the registries newRegistry makes.
func Run(t *testing.T, newRegistry NewRegistry, o Options) {
	t.Run("PublishReadBack", func(t *testing.T) { testReadBack(t, newRegistry(t, 1)[0]) })
	t.Run("ReplicasSeeEachOther", func(t *testing.T) { testReplicas(t, newRegistry(t, 2)) })
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, newRegistry(t, 2)) })
	t.Run("Withdraw", func(t *testing.T) { testWithdraw(t, newRegistry(t, 2)) })
	t.Run("ValuesRoundTrip", func(t *testing.T) { testValues(t, newRegistry(t, 1)[0]) })
	t.Run("ManyLevels", func(t *testing.T) { testManyLevels(t, newRegistry(t, 2)) })
	t.Run("ConcurrentReplicas", func(t *testing.T) { testConcurrent(t, newRegistry(t, 8)) })
	t.Run("Cap", func(t *testing.T) {
		if o.Cap <= 0 {
			t.Skip("the registry keeps every entry")
		}
		testCap(t, newRegistry(t, 2), o.Cap)
	})
}

// T0 is the instant the suite starts from.
var T0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// ttl is how long the suite's entries live, unless a case says otherwise.
const ttl = 10 * time.Second

// View is what a publish returns: each level's live entries.
type View = map[string][]rlqs.Entry

func entry(level, instance string, demand float64, active int64) rlqs.Entry {
	return rlqs.Entry{Level: level, Instance: instance, Demand: demand, Active: active}
}

// publish publishes at T0+at, failing the test on error.
func publish(t *testing.T, r rlqs.Registry, at, ttl time.Duration, es ...rlqs.Entry) View {
	t.Helper()
	v, err := r.Publish(context.Background(), T0.Add(at), ttl, es)
	if err != nil {
		t.Fatalf("publish at T0+%v: %v", at, err)
	}
	return v
}

func withdraw(t *testing.T, r rlqs.Registry, instance string, levels ...string) {
	t.Helper()
	if err := r.Withdraw(context.Background(), instance, levels); err != nil {
		t.Fatalf("withdraw %s from %v: %v", instance, levels, err)
	}
}

// Check fails the test unless got holds exactly the levels of want, each
// with the same entries in any order; demands compare by their bits, so
// +Inf is +Inf.
func Check(t *testing.T, what string, got, want View) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d levels, want %d", what, len(got), len(want))
	}
	for level, w := range want {
		g, ok := got[level]
		if !ok {
			t.Fatalf("%s: level %q missing", what, level)
		}
		if gs, ws := describe(g), describe(w); gs != ws {
			t.Fatalf("%s: level %q:\n got  %s\n want %s", what, level, gs, ws)
		}
	}
}

// describe lists entries sorted by instance, demands by their bits.
func describe(es []rlqs.Entry) string {
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b rlqs.Entry) int { return strings.Compare(a.Instance, b.Instance) })
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "{%q %q %v(%#x) %d} ", e.Level, e.Instance, e.Demand, math.Float64bits(e.Demand), e.Active)
	}
	return fmt.Sprintf("%d: %s", len(es), b.String())
}

func testReadBack(t *testing.T, r rlqs.Registry) {
	if v := publish(t, r, 0, ttl); len(v) != 0 {
		t.Fatalf("an empty publish returned %v", v)
	}
	a1, a2 := entry("api|u=a", "env-1", 2.5, 100), entry("api|u=a|x=1", "env-1", 0, 0)
	v := publish(t, r, 0, ttl, a1, a2)
	Check(t, "first publish", v, View{a1.Level: {a1}, a2.Level: {a2}})

	// Published again, an entry is replaced, not added; within one call
	// the last of an instance's entries on a level counts.
	a1b := entry(a1.Level, "env-1", 7, 200)
	v = publish(t, r, time.Second, ttl, a1, a1b)
	Check(t, "republished", v, View{a1.Level: {a1b}})
	// Only the levels published on are returned, the others kept.
	v = publish(t, r, 2*time.Second, ttl, a2)
	Check(t, "the other level", v, View{a2.Level: {a2}})
}

func testReplicas(t *testing.T, rs []rlqs.Registry) {
	const level = "api|u=a"
	a, b := entry(level, "env-a", 1, 10), entry(level, "env-b@replica-2", 3, 20)
	Check(t, "replica 1 alone", publish(t, rs[0], 0, ttl, a), View{level: {a}})
	Check(t, "replica 2 sees 1", publish(t, rs[1], time.Second, ttl, b), View{level: {a, b}})
	a.Demand = 4
	Check(t, "replica 1 sees 2", publish(t, rs[0], 2*time.Second, ttl, a), View{level: {a, b}})
	// Two instances of one replica on one level are two entries.
	c := entry(level, "rls@replica-2", 0.5, 0)
	Check(t, "two of replica 2", publish(t, rs[1], 3*time.Second, ttl, b, c), View{level: {a, b, c}})
}

func testExpiry(t *testing.T, rs []rlqs.Registry) {
	const level = "api|u=a"
	a, b := entry(level, "a", 1, 0), entry(level, "b", 2, 0)
	publish(t, rs[0], 0, ttl, a)
	Check(t, "within its TTL", publish(t, rs[1], 5*time.Second, ttl, b), View{level: {a, b}})
	// An entry lives to the end of its TTL, the instant included...
	Check(t, "at its expiry", publish(t, rs[1], ttl, ttl, b), View{level: {a, b}})
	// ...and not a microsecond more.
	Check(t, "past its expiry", publish(t, rs[1], ttl+time.Microsecond, ttl, b), View{level: {b}})
	Check(t, "not back", publish(t, rs[1], ttl+time.Second, ttl, b), View{level: {b}})
	Check(t, "published again", publish(t, rs[0], ttl+2*time.Second, ttl, a), View{level: {a, b}})

	// Each publish has its own TTL.
	const other = "api|u=b"
	long, short := entry(other, "long", 1, 0), entry(other, "short", 1, 0)
	publish(t, rs[0], 0, time.Minute, long)
	publish(t, rs[1], 0, time.Second, short)
	Check(t, "the short one gone", publish(t, rs[0], 2*time.Second, time.Minute, long), View{other: {long}})
	// A TTL already over: the entry is gone at once, and its level named.
	Check(t, "a TTL of 0", publish(t, rs[0], 3*time.Second, -time.Second, entry("api|u=c", "x", 1, 0)), View{"api|u=c": nil})
}

func testWithdraw(t *testing.T, rs []rlqs.Registry) {
	const l1, l2 = "api|u=a", "api|u=a|x=1"
	a1, a2, b1, b2 := entry(l1, "a", 1, 0), entry(l2, "a", 1, 0), entry(l1, "b", 2, 0), entry(l2, "b", 2, 0)
	publish(t, rs[0], 0, ttl, a1, a2)
	publish(t, rs[1], 0, ttl, b1, b2)
	withdraw(t, rs[0], "a", l1)
	Check(t, "a withdrawn from l1", publish(t, rs[1], time.Second, ttl, b1, b2), View{l1: {b1}, l2: {a2, b2}})
	// Withdrawing what is not there, or nothing, is no error.
	withdraw(t, rs[0], "a", l1, "api|u=nobody")
	withdraw(t, rs[1], "nobody", l2)
	withdraw(t, rs[1], "b")
	withdraw(t, rs[1], "b", l1, l2)
	Check(t, "b withdrawn", publish(t, rs[0], 2*time.Second, ttl, a2), View{l2: {a2}})
	Check(t, "back", publish(t, rs[0], 3*time.Second, ttl, a1), View{l1: {a1}})
}

func testValues(t *testing.T, r rlqs.Registry) {
	const level = "api|u=a"
	es := []rlqs.Entry{
		entry(level, "unknown", math.Inf(1), 0),
		entry(level, "zero", 0, -1),
		entry(level, "tiny", math.SmallestNonzeroFloat64, math.MinInt64),
		entry(level, "huge", math.MaxFloat64, math.MaxInt64),
		entry(level, "third", 1.0/3, T0.UnixMicro()),
		entry(level, "", 5, 1),
		entry(level, "bytes {}|#%\x00\xff é", 6, 2),
	}
	Check(t, "values", publish(t, r, 0, ttl, es...), View{level: es})
	// Levels of every form a bucket key takes: a domain alone, marks,
	// escapes, a wildcard.
	var levels []rlqs.Entry
	for _, l := range []string{"api", "api|u=a|#lb2", "api|u=a|#sw1m/1s", "api|u=a|#10/second/fw",
		"api|u=%7Bx%7D|p=%7C", "api|path=/v1*", "other|u=a", "api|u=a|x=1|y=2|z=3"} {
		levels = append(levels, entry(l, "i", 1, 0))
	}
	want := View{}
	for _, e := range levels {
		want[e.Level] = []rlqs.Entry{e}
	}
	want[level] = es
	Check(t, "levels", publish(t, r, time.Second, ttl, append(levels, es...)...), want)
}

// manyLevels is more levels than one script call takes (256), over many
// hierarchies, so over many Cluster slots.
const manyLevels = 600

func testManyLevels(t *testing.T, rs []rlqs.Registry) {
	var as, bs []rlqs.Entry
	want := View{}
	for i := range manyLevels {
		level := fmt.Sprintf("d%d|u=u%d", i%3, i/2)
		if i%2 == 1 {
			level += "|x=1"
		}
		a, b := entry(level, "a", float64(i), int64(i)), entry(level, "b", float64(2*i), 0)
		as, bs = append(as, a), append(bs, b)
		want[level] = []rlqs.Entry{a, b}
	}
	publish(t, rs[0], 0, ttl, as...)
	Check(t, "replica 2", publish(t, rs[1], time.Second, ttl, bs...), want)
	Check(t, "replica 1", publish(t, rs[0], 2*time.Second, ttl, as...), want)
}

func testConcurrent(t *testing.T, rs []rlqs.Registry) {
	const levels = 50
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	for n, r := range rs {
		wg.Go(func() {
			var es []rlqs.Entry
			for l := range levels {
				es = append(es, entry(fmt.Sprintf("api|u=%d", l), fmt.Sprintf("r%d", n), float64(n), 0))
			}
			for round := range 5 {
				if _, err := r.Publish(context.Background(), T0.Add(time.Duration(round)*time.Millisecond), ttl, es); err != nil {
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
	var es []rlqs.Entry
	want := View{}
	for l := range levels {
		level := fmt.Sprintf("api|u=%d", l)
		for n := range rs {
			want[level] = append(want[level], entry(level, fmt.Sprintf("r%d", n), float64(n), 0))
		}
		es = append(es, want[level][0])
	}
	Check(t, "after all", publish(t, rs[0], time.Second, ttl, es...), want)
}

func testCap(t *testing.T, rs []rlqs.Registry, most int) {
	const level = "api|u=a"
	old := entry(level, "old", 1, 0)
	publish(t, rs[0], 0, ttl, old)
	// most entries that expire after old's: old goes.
	var many []rlqs.Entry
	for i := range most {
		many = append(many, entry(level, fmt.Sprintf("n%05d", i), float64(i), 0))
	}
	Check(t, "full", publish(t, rs[1], time.Second, ttl, many...), View{level: many})
	// old again, expiring last: of those expiring soonest, all at once,
	// the first by its bytes goes.
	want := append([]rlqs.Entry{old}, many[1:]...)
	Check(t, "old back", publish(t, rs[0], 2*time.Second, ttl, old), View{level: want})
	// A level under its cap keeps all.
	Check(t, "another level", publish(t, rs[0], 2*time.Second, ttl, entry("api|u=b", "x", 1, 0)), View{"api|u=b": {entry("api|u=b", "x", 1, 0)}})
}
