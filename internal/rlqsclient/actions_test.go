package rlqsclient

import (
	"slices"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

var (
	allowAll = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	denyAll  = blanket(typev3.RateLimitStrategy_DENY_ALL)
)

// TestDroppedActions: requests_per_time_unit, no strategy, no bucket_id and
// an unknown bucket are skipped, leaving the assignment and its expiry.
func TestDroppedActions(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	respond(t, i, fs, assign(alice, denyAll, 10*time.Second))
	clock.Advance(5 * time.Second)
	rptu := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 10, TimeUnit: typev3.RateLimitUnit_SECOND},
	}}
	noID := assign(nil, allowAll, time.Hour)
	noID.BucketId = nil
	respond(t, i, fs,
		assign(alice, rptu, time.Hour),
		assign(alice, nil, time.Hour),
		noID,
		assign(map[string]string{}, allowAll, time.Hour),
		assign(bob, allowAll, time.Hour),
	)
	if i.Request(alice) {
		t.Error("allowed: a dropped action replaced DENY_ALL")
	}
	clock.Advance(5 * time.Second)
	if !i.Request(alice) {
		t.Error("denied at 10 s: a dropped action renewed the TTL")
	}
	want := []MisreadKind{RequestsPerTimeUnit, NoStrategy, MissingBucketID, MissingBucketID, UnknownBucket}
	if got := kinds(i); !slices.Equal(got, want) {
		t.Errorf("misreads %v, want %v", got, want)
	}
	for _, m := range i.Misreads() {
		if !m.Dropped || m.Action == nil || m.Why == "" {
			t.Errorf("misread %+v: want dropped, with the action and why", m)
		}
	}
	if s := i.Stats(); s.ActionsDropped != 5 || s.ActionsApplied != 1 {
		t.Errorf("stats %+v: want 5 dropped, 1 applied", s)
	}
}

// TestActionWithoutAction: a bucket action with neither oneof is cached,
// fails open, and expires at once: it ends the current assignment.
func TestActionWithoutAction(t *testing.T) {
	i, fs, _ := setup(t, Options{NoAssignment: denyAll})
	respond(t, i, fs, assign(alice, allowAll, time.Hour))
	respond(t, i, fs, &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: alice}})
	if i.Request(alice) {
		t.Error("allowed: the empty action should have expired to DENY_ALL")
	}
	if got := kinds(i); !slices.Equal(got, []MisreadKind{NoAction}) {
		t.Errorf("misreads %v", got)
	}
}

// TestTTL: a TTL of 0 expires at once; 1.9 s lasts 1 s; unset expires at
// once although documented as no expiry.
func TestTTL(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	respond(t, i, fs, assign(alice, denyAll, 0))
	if !i.Request(alice) {
		t.Error("denied: a TTL of 0 should have expired at once")
	}
	if a, _ := i.Assignment(alice); a.Source != FromNoAssignment || a.Rule != AllowAll || !a.Expires.IsZero() {
		t.Errorf("assignment %+v, want the default", a)
	}

	respond(t, i, fs, assign(alice, denyAll, 1900*time.Millisecond))
	a, _ := i.Assignment(alice)
	if want := clock.Now().Add(time.Second); !a.Expires.Equal(want) || a.Rule != DenyAll {
		t.Errorf("assignment %+v, want DENY_ALL expiring at %v", a, want)
	}
	clock.Advance(999 * time.Millisecond)
	if i.Request(alice) {
		t.Error("allowed before 1 s")
	}
	clock.Advance(time.Millisecond)
	if !i.Request(alice) {
		t.Error("denied at 1 s: 1.9 s should last 1 s")
	}

	respond(t, i, fs, assign(alice, denyAll, -1))
	if !i.Request(alice) {
		t.Error("denied: an unset TTL expires at once in Envoy")
	}
	want := []MisreadKind{TTLTruncated, TTLUnset}
	if got := kinds(i); !slices.Equal(got, want) {
		t.Errorf("misreads %v, want %v", got, want)
	}
}

// TestFallbackThenDefault: an expired assignment falls back to
// expired_assignment_behavior for its whole seconds, then to the default.
func TestFallbackThenDefault(t *testing.T) {
	i, fs, clock := setup(t, Options{Expired: denyAll, ExpiredTTL: 3700 * time.Millisecond})
	t0 := clock.Now()
	respond(t, i, fs, assign(alice, allowAll, 2*time.Second))
	clock.Advance(2500 * time.Millisecond)
	a, _ := i.Assignment(alice)
	if a.Source != FromExpired || a.Rule != DenyAll || !a.Expires.Equal(t0.Add(5*time.Second)) {
		t.Errorf("at 2.5 s: %+v, want the fallback until 5 s (2 s + 3 s)", a)
	}
	if i.Request(alice) {
		t.Error("allowed under the DENY_ALL fallback")
	}
	clock.Advance(2500 * time.Millisecond)
	if a, _ := i.Assignment(alice); a.Source != FromNoAssignment {
		t.Errorf("at 5 s: %+v, want the default", a)
	}
	if !i.Request(alice) {
		t.Error("denied under the default")
	}

	// Both timers due by the same read still fire in order.
	respond(t, i, fs, assign(alice, allowAll, time.Second))
	clock.Advance(time.Hour)
	if a, _ := i.Assignment(alice); a.Source != FromNoAssignment {
		t.Errorf("an hour on: %+v, want the default", a)
	}
}

// TestTokenBucketFallback: a fallback token bucket equal to the expired
// one keeps its limiter; a different one takes the old share of tokens.
func TestTokenBucketFallback(t *testing.T) {
	i, fs, clock := setup(t, Options{Expired: tokens(4, 1, time.Hour), ExpiredTTL: time.Minute})
	respond(t, i, fs, assign(alice, tokens(4, 1, time.Hour), time.Second))
	admits(i, alice, 3)
	clock.Advance(time.Second)
	if got := admits(i, alice, 3); got != 1 {
		t.Errorf("%d admitted in the fallback, want the 1 token carried over", got)
	}

	// A blanket rule drops the limiter, so the next token bucket starts full.
	respond(t, i, fs, assign(alice, allowAll, time.Hour), assign(alice, tokens(8, 1, time.Hour), time.Second))
	admits(i, alice, 4) // 4 of 8 left
	clock.Advance(time.Second)
	if got := admits(i, alice, 4); got != 2 {
		t.Errorf("%d admitted in the fallback, want 2 (half of 4)", got)
	}
}

// TestAbandon: abandon erases the bucket; an action for it is then unknown;
// its next request re-creates it with a new initial report.
func TestAbandon(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	i.Request(alice)
	respond(t, i, fs, abandon(alice))
	if _, ok := i.Assignment(alice); ok {
		t.Fatal("alice still cached after abandon")
	}
	respond(t, i, fs, assign(alice, denyAll, time.Hour))
	clock.Advance(7 * time.Second)
	if !i.Request(alice) {
		t.Error("denied: the assignment for an abandoned bucket was applied")
	}
	checkUsage(t, usageOf(t, fs.next(t), alice), 1, 0, 0)
	if got := kinds(i); !slices.Equal(got, []MisreadKind{UnknownBucket}) {
		t.Errorf("misreads %v", got)
	}
	waitFor(t, "the new initial report booked", func() bool { return i.Stats().Buckets[0].ReportedAllowed == 2 })
	b := i.Stats().Buckets[0]
	if b.Created != 2 || b.Abandoned != 1 || b.LostAllowed != 1 || b.ReportedAllowed != 2 || b.Allowed != 3 {
		t.Errorf("totals %+v: want 2 creations, the request before abandon lost", b)
	}
}

// TestEmptyReportAfterAbandon: with every bucket abandoned, a tick still
// sends a report, of the domain alone.
func TestEmptyReportAfterAbandon(t *testing.T) {
	i, fs, _ := setup(t, Options{Domain: "shop"})
	respond(t, i, fs, abandon(alice))
	i.Report()
	if r := fs.next(t); r.GetDomain() != "shop" || len(r.GetBucketQuotaUsages()) != 0 {
		t.Errorf("report %v, want the domain alone", r)
	}
}

// TestUnknownBlanketRule: a blanket rule past DENY_ALL fails open.
func TestUnknownBlanketRule(t *testing.T) {
	i, fs, _ := setup(t, Options{NoAssignment: denyAll})
	respond(t, i, fs, assign(alice, blanket(7), time.Hour))
	if !i.Request(alice) {
		t.Error("denied under an unknown blanket rule")
	}
	if a, _ := i.Assignment(alice); a.Rule != FailOpen {
		t.Errorf("rule %v, want fail_open", a.Rule)
	}
	if got := kinds(i); !slices.Equal(got, []MisreadKind{UnknownBlanketRule}) {
		t.Errorf("misreads %v", got)
	}
}

// TestResponseAfterExpiry: timers due before a response fire first, so the
// same token bucket sent after its assignment fell back to a blanket rule
// starts a new, full limiter instead of carrying the drained one.
func TestResponseAfterExpiry(t *testing.T) {
	i, fs, clock := setup(t, Options{Expired: denyAll, ExpiredTTL: time.Minute})
	respond(t, i, fs, assign(alice, tokens(2, 1, time.Hour), time.Second))
	admits(i, alice, 2)
	clock.Advance(2 * time.Second)
	respond(t, i, fs, assign(alice, tokens(2, 1, time.Hour), time.Hour))
	if got := admits(i, alice, 3); got != 2 {
		t.Errorf("%d admitted, want 2 from a new full limiter", got)
	}
}
