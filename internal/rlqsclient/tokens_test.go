package rlqsclient

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// setup creates alice's bucket and returns the stream its report went on.
func setup(t *testing.T, opts Options) (*Instance, *fakeStream, *ManualClock) {
	t.Helper()
	i, f, clock := start(t, opts)
	i.Request(alice)
	fs := f.nextStream(t)
	fs.next(t)
	return i, fs, clock
}

// TestTokenBucketAdmitsMaxThenRefills: a new token bucket starts full,
// then refills continuously at tokens_per_fill / fill_interval.
func TestTokenBucketAdmitsMaxThenRefills(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	respond(t, i, fs, assign(alice, tokens(3, 1, 2*time.Second), time.Hour))
	steps := []struct {
		advance time.Duration
		n, want int
	}{
		{0, 5, 3},           // full: max_tokens at once
		{time.Second, 1, 0}, // half a token
		{time.Second, 2, 1}, // one token after 2 s
		{1500 * time.Millisecond, 1, 0},
		{500 * time.Millisecond, 1, 1},
		{time.Minute, 5, 3}, // capped at max_tokens
	}
	for n, s := range steps {
		clock.Advance(s.advance)
		if got := admits(i, alice, s.n); got != s.want {
			t.Errorf("step %d: %d of %d admitted, want %d", n, got, s.n, s.want)
		}
	}
	a, _ := i.Assignment(alice)
	if a.Source != FromServer || a.Rule != TokenBucket || a.MaxTokens != 3 || a.FillRate != 0.5 || a.Tokens != 0 {
		t.Errorf("assignment %+v", a)
	}
}

// TestIdenticalAssignmentKeepsTokens: the same token bucket again keeps the
// limiter and its tokens (only its TTL is renewed).
func TestIdenticalAssignmentKeepsTokens(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	respond(t, i, fs, assign(alice, tokens(3, 1, 10*time.Second), 2*time.Second))
	admits(i, alice, 3)
	clock.Advance(time.Second)
	respond(t, i, fs, assign(alice, tokens(3, 1, 10*time.Second), 2*time.Second))
	if got := admits(i, alice, 3); got != 0 {
		t.Errorf("%d admitted after the same assignment, want 0: the bucket was refilled", got)
	}
	clock.Advance(1500 * time.Millisecond) // 2.5 s after the first: alive thanks to the second
	if a, _ := i.Assignment(alice); a.Source != FromServer {
		t.Errorf("source %v: the repeated assignment did not renew the TTL", a.Source)
	}
}

// TestChangedTokenBucketReplaces: a different max_tokens replaces the
// limiter, at the old one's share of tokens (Envoy since 1.33): full from
// a full one, empty from an empty one, full when there was none.
func TestChangedTokenBucketReplaces(t *testing.T) {
	i, fs, _ := setup(t, Options{})
	respond(t, i, fs, assign(alice, tokens(10, 1, time.Hour), time.Hour))
	if got := admits(i, alice, 5); got != 5 {
		t.Fatalf("%d of 5 admitted from a full bucket of 10", got)
	}
	respond(t, i, fs, assign(alice, tokens(21, 1, time.Hour), time.Hour))
	if got := admits(i, alice, 20); got != 10 {
		t.Errorf("%d admitted, want 10: half of 21, truncated", got)
	}
	respond(t, i, fs, assign(alice, tokens(30, 1, time.Hour), time.Hour))
	if got := admits(i, alice, 5); got != 0 {
		t.Errorf("%d admitted, want 0: the old bucket was empty", got)
	}
	respond(t, i, fs, assign(alice, blanket(typev3.RateLimitStrategy_ALLOW_ALL), time.Hour))
	respond(t, i, fs, assign(alice, tokens(4, 1, time.Hour), time.Hour))
	if got := admits(i, alice, 5); got != 4 {
		t.Errorf("%d admitted, want 4: no limiter before, so a full one", got)
	}
	if m := i.Misreads(); len(m) != 0 {
		t.Errorf("misreads %v, want none", kinds(i))
	}
}

// TestFillSecondsAloneIgnored: a fill interval whose seconds alone change
// keeps the old limiter and its old rate, and is a misread.
func TestFillSecondsAloneIgnored(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	respond(t, i, fs, assign(alice, tokens(2, 2, 10*time.Second), time.Hour))
	admits(i, alice, 2)
	respond(t, i, fs, assign(alice, tokens(2, 2, time.Second), time.Hour))
	clock.Advance(time.Second) // at 2 tokens/s there would be 2
	if got := admits(i, alice, 2); got != 0 {
		t.Errorf("%d admitted after 1 s, want 0: the old 0.2/s rate holds", got)
	}
	clock.Advance(4 * time.Second)
	if got := admits(i, alice, 2); got != 1 {
		t.Errorf("%d admitted after 5 s, want 1", got)
	}
	if a, _ := i.Assignment(alice); a.FillRate != 0.2 {
		t.Errorf("fill rate %v, want the old 0.2", a.FillRate)
	}
	m := i.Misreads()
	if len(m) != 1 || m[0].Kind != FillSecondsIgnored || m[0].Dropped || keyOf(m[0].Bucket) != keyOf(alice) {
		t.Errorf("misreads %+v, want one fill_seconds_ignored for alice", m)
	}
}

// TestFillIntervalReading: a sub-second interval divides by zero (the
// bucket never runs out), a fraction of a second is dropped, an unset
// tokens_per_fill is read as 0; each is a misread, none a drop.
func TestFillIntervalReading(t *testing.T) {
	i, fs, clock := setup(t, Options{})
	respond(t, i, fs, assign(alice, tokens(1, 1, 500*time.Millisecond), time.Hour))
	if got := admits(i, alice, 100); got != 100 {
		t.Errorf("%d of 100 admitted with a 0.5 s interval, want all", got)
	}
	if a, _ := i.Assignment(alice); !math.IsInf(a.FillRate, 1) {
		t.Errorf("fill rate %v, want +Inf", a.FillRate)
	}

	respond(t, i, fs, assign(alice, tokens(2, 1, 1500*time.Millisecond), time.Hour))
	admits(i, alice, 2)
	clock.Advance(time.Second)
	if got := admits(i, alice, 2); got != 1 {
		t.Errorf("%d admitted 1 s in at 1 per 1.5 s, want 1 (read as 1 per 1 s)", got)
	}

	unset := tokens(5, 0, 3*time.Second)
	unset.GetTokenBucket().TokensPerFill = nil
	respond(t, i, fs, assign(alice, unset, 2*time.Hour))
	admits(i, alice, 5)
	clock.Advance(time.Hour)
	if got := admits(i, alice, 1); got != 0 {
		t.Errorf("%d admitted an hour later, want 0: one token a year", got)
	}
	want := []MisreadKind{SubSecondFillInterval, FillIntervalTruncated, TokensPerFillUnset}
	if got := kinds(i); !slices.Equal(got, want) {
		t.Errorf("misreads %v, want %v", got, want)
	}
}

// TestConcurrentRequests: many goroutines share one limiter exactly.
func TestConcurrentRequests(t *testing.T) {
	i, fs, _ := setup(t, Options{})
	respond(t, i, fs, assign(alice, tokens(100, 1, time.Hour), time.Hour))
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 50 {
		wg.Go(func() {
			n := admits(i, alice, 10)
			mu.Lock()
			allowed += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if allowed != 100 {
		t.Errorf("%d of 500 admitted, want 100", allowed)
	}
	if b := i.Stats().Buckets[0]; b.Allowed != 101 || b.Denied != 400 {
		t.Errorf("totals %+v, want 101 allowed (with the first) and 400 denied", b)
	}
}

func TestWholeSeconds(t *testing.T) {
	for _, c := range []struct {
		s    int64
		n    int32
		want int64
	}{
		{0, 999_999_999, 0}, {1, 0, 1}, {1, 900_000_000, 1}, {2, -500_000_000, 1},
		{-1, -500_000_000, -1}, {-1, 500_000_000, 0}, {0, 2_000_000_000, 2},
	} {
		if got := wholeSeconds(&durationpb.Duration{Seconds: c.s, Nanos: c.n}); got != c.want {
			t.Errorf("wholeSeconds(%ds %dns) = %d, want %d", c.s, c.n, got, c.want)
		}
	}
}

// TestZeroRates: 0 tokens over 0 s is NaN in Envoy, a full bucket too; a
// max of 0 denies everything; a zero rate refills one token a year.
func TestZeroRates(t *testing.T) {
	now := time.Unix(0, 0)
	nan := tokenBucketFrom(tokens(2, 0, 0).GetTokenBucket(), nil, now)
	if !math.IsNaN(nan.rate) || !nan.take(now) || !nan.take(now) || !nan.take(now) {
		t.Errorf("a NaN-rate bucket %+v does not stay full", nan)
	}
	if empty := tokenBucketFrom(tokens(0, 1, 0).GetTokenBucket(), nil, now); empty.take(now) {
		t.Error("a bucket of max 0 admitted")
	}
	slow := tokenBucketFrom(tokens(1, 0, time.Second).GetTokenBucket(), nil, now)
	slow.take(now)
	if slow.take(now.Add(364*24*time.Hour)) || !slow.take(now.Add(366*24*time.Hour)) {
		t.Error("a zero rate does not refill one token a year")
	}
}
