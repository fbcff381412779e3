package rlqs

import (
	"testing"
)

func TestFillInterval(t *testing.T) {
	for i, c := range []struct {
		rate float64
		want int64
	}{
		{1000, 1}, {5000, 1}, {100, 10}, {1, 1000}, {1.0 / 6, maxFillInterval}, {0, maxFillInterval}, {-1, maxFillInterval},
	} {
		if got := FillInterval(c.rate); got != c.want {
			t.Errorf("step %d: FillInterval(%v) = %d, want %d", i, c.rate, got, c.want)
		}
	}
}

func TestQuantize(t *testing.T) {
	for i, c := range []struct{ n, want uint64 }{
		{0, 0}, {15, 15}, {16, 16}, {17, 16}, {31, 30}, {1000, 960}, {1023, 960}, {1024, 1024},
	} {
		if got := quantize(c.n); got != c.want || float64(got) < 0.875*float64(c.n) {
			t.Errorf("step %d: quantize(%d) = %d, want %d", i, c.n, got, c.want)
		}
	}
}

// TestNext is a step table of one Envoy's assignments as its share moves:
// a first share is sent; small moves keep the bucket (no refill); a cut
// is sent at once; a raise only past raiseAt.
func TestNext(t *testing.T) {
	const fill = 10 // a limit of 100/s
	steps := []struct {
		share float64
		burst int64
		want  Assignment
	}{
		{50, 50, Assignment{Kind: TokenBucket, MaxTokens: 50, TokensPerFill: 480, FillInterval: fill}},   // 500 quantized
		{51, 51, Assignment{Kind: TokenBucket, MaxTokens: 50, TokensPerFill: 480, FillInterval: fill}},   // 510 quantizes to 480 too: kept
		{50.3, 50, Assignment{Kind: TokenBucket, MaxTokens: 50, TokensPerFill: 480, FillInterval: fill}}, // 503: still 480
		{52.5, 52, Assignment{Kind: TokenBucket, MaxTokens: 52, TokensPerFill: 512, FillInterval: fill}}, // 525: another quantum, 5% over: raised
		{53.5, 53, Assignment{Kind: TokenBucket, MaxTokens: 52, TokensPerFill: 512, FillInterval: fill}}, // 535: the same quantum
		{51, 51, Assignment{Kind: TokenBucket, MaxTokens: 51, TokensPerFill: 480, FillInterval: fill}},   // 510 -> 480 < 512: cut
		{51.3, 51, Assignment{Kind: TokenBucket, MaxTokens: 51, TokensPerFill: 512, FillInterval: fill}}, // 513 -> 512, 7% over 480: raised
		{10, 10, Assignment{Kind: TokenBucket, MaxTokens: 10, TokensPerFill: 96, FillInterval: fill}},    // a big cut
		{0, 0, Assignment{Kind: TokenBucket, MaxTokens: 1, TokensPerFill: 0, FillInterval: fill}},        // nothing: no refill
		{0.2, 0, Assignment{Kind: TokenBucket, MaxTokens: 1, TokensPerFill: 2, FillInterval: fill}},      // something again
	}
	var prev Assignment
	for i, s := range steps {
		got := Next(prev, s.share, s.burst, fill)
		if got != s.want {
			t.Fatalf("step %d: Next(%+v, %v, %d) = %+v, want %+v", i, prev, s.share, s.burst, got, s.want)
		}
		if got.Rate() > s.share+1e-9 {
			t.Fatalf("step %d: sent %v/s for a share of %v/s", i, got.Rate(), s.share)
		}
		prev = got
	}
	// Another fill interval (the limit changed): sent anew.
	if got := Next(prev, 0.2, 5, 20); got.FillInterval != 20 || got.TokensPerFill != 4 || got.MaxTokens != 5 {
		t.Fatalf("a new fill interval: %+v", got)
	}
	// A new fill interval alone: Envoy would keep the old bucket, which
	// another size makes new.
	same := Assignment{Kind: TokenBucket, MaxTokens: 5, TokensPerFill: 10, FillInterval: 2}
	if got := Next(same, 2.5, 5, 4); got.FillInterval != 4 || got.TokensPerFill != 10 || got.MaxTokens == 5 {
		t.Fatalf("a new fill interval, the same tokens: %+v, want another max_tokens", got)
	}
	// A blanket rule before: a token bucket now.
	if got := Next(Assignment{Kind: AllowAll}, 1, 1, 1); got.Kind != TokenBucket || got.TokensPerFill != 1 {
		t.Fatalf("after a blanket rule: %+v", got)
	}
}

func TestSameBucket(t *testing.T) {
	a := Assignment{Kind: TokenBucket, MaxTokens: 5, TokensPerFill: 10, FillInterval: 2, TTL: 15}
	b := a
	b.TTL = 30
	if !a.SameBucket(b) {
		t.Fatal("a new TTL alone changes the bucket")
	}
	b.MaxTokens = 6
	if a.SameBucket(b) || a.SameBucket(Assignment{Kind: AllowAll}) || !(Assignment{Kind: DenyAll}).SameBucket(Assignment{Kind: DenyAll, TTL: 3}) {
		t.Fatal("SameBucket")
	}
}
