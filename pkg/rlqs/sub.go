package rlqs

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// sub is one bucket one stream reports: a subscriber of each level its
// BucketId resolves to.
type sub struct {
	key string // its BucketId's pairs, sorted: the stream's key for it
	// raw is its BucketId as its Envoy first encoded it: what finds it
	// in a report, and what its answers name; aliases are other
	// encodings of it seen since (a map's order is not fixed).
	raw     string
	aliases []string
	// levels are the limits its walk meets (nil: unmatched).
	levels    []subLevel
	unlimited bool                // allow-listed by a node on its walk
	cfg       *descriptors.Config // the config levels come from
	// samples are its recent reports: requests and the seconds they came
	// in (the service's clock; 0 for a first report).
	samples [demandSamples]sample
	next    int
	// active is when it last reported a request, lastAt when it last
	// reported at all.
	active, lastAt time.Time
	// sent is its assignment in force, and sentAt when it was sent.
	sent   Assignment
	sentAt time.Time
	// seen is the stream's last report that named it.
	seen uint64
	// answer is its BucketAction encoded, for answerFor and raw.
	answer    []byte
	answerFor Assignment
}

// subLevel is a level of a sub: the limit, the stream's level, and the
// sub's part of it at the last division (capping its demand on the levels
// above, at the next; -1 before one).
type subLevel struct {
	descriptors.Level
	sl    *streamLevel
	share float64
}

type sample struct {
	requests int64
	seconds  float64
}

// demandSamples is how many reports a demand is measured over: enough to
// smooth one odd report, few enough to follow a change within a few.
const demandSamples = 3

// maxReported caps the requests one report may count, so that no sum
// wraps, as a count saturates at leaky.MaxSize.
const maxReported = leaky.MaxSize

// note records a report: requests allowed and denied since the last,
// received at now.
func (b *sub) note(allowed, denied uint64, seconds float64, now time.Time) {
	n := int64(min(allowed, maxReported) + min(denied, maxReported))
	b.samples[b.next] = sample{requests: n, seconds: seconds}
	b.next = (b.next + 1) % demandSamples
	if n > 0 {
		b.active = now
	}
}

// demand is the requests per second the bucket wants: what its recent
// reports counted over the time they span; unknown (+Inf) before a report
// has spanned any time.
func (b *sub) demand() float64 {
	var n int64
	var secs float64
	for _, s := range b.samples {
		n += s.requests
		secs += s.seconds
	}
	if secs <= 0 {
		return unknown
	}
	return float64(n) / secs
}

// cappedDemand is the bucket's demand on its level i: no more than its
// share of the levels below (a user's actions each limited cannot use a
// larger part of the user's limit).
func (b *sub) cappedDemand(i int) float64 {
	d := b.demand()
	for j := i + 1; j < len(b.levels); j++ {
		if s := b.levels[j].share; s >= 0 && !b.levels[j].Rule.Shadow {
			d = math.Min(d, s)
		}
	}
	return d
}

// bucketKey is a BucketId's pairs, sorted, escaped and joined: equal for
// equal maps.
func bucketKey(pairs map[string]string) string {
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(escapePair(k))
		b.WriteByte('=')
		b.WriteString(escapePair(pairs[k]))
	}
	return b.String()
}

func escapePair(s string) string {
	if !strings.ContainsAny(s, `,=\`) {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `=`, `\=`)
	return r.Replace(s)
}

// checkBucket says what is wrong with a BucketId: none, too many pairs,
// an empty key, a key or value too long.
func checkBucket(pairs map[string]string, maxEntries, maxBytes int) error {
	switch {
	case len(pairs) == 0:
		return fmt.Errorf("has no pairs: a BucketId names a bucket by at least one")
	case len(pairs) > maxEntries:
		return fmt.Errorf("has %d pairs: at most %d (-max-entries)", len(pairs), maxEntries)
	}
	for k, v := range pairs {
		switch {
		case k == "":
			return fmt.Errorf("has a pair with an empty key")
		case len(k) > maxBytes:
			return fmt.Errorf("has a key of %d bytes: at most %d (-max-entry-bytes)", len(k), maxBytes)
		case len(v) > maxBytes:
			return fmt.Errorf("has a value of %d bytes for key %q: at most %d (-max-entry-bytes)", len(v), clip(k), maxBytes)
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// resolve finds b's levels, of a BucketId of pairs, in cfg's domain: the limits its walk meets
// (shadow ones are charged, and never limit), none if it has no domain;
// unlimited if a node on the walk allow-lists it.
func (b *sub) resolve(cfg *descriptors.Config, domain string, pairs map[string]string) {
	b.cfg, b.levels, b.unlimited = cfg, nil, false
	d := cfg.Domain(domain)
	if d == nil {
		return
	}
	entries := d.Order(pairs)
	levels := d.Resolve(entries, nil, nil)
	b.unlimited = len(levels) == 0 && d.Unlimited(entries)
	if len(levels) > 0 {
		b.levels = make([]subLevel, len(levels))
		for i, l := range levels {
			b.levels[i] = subLevel{Level: l, share: -1}
		}
	}
}
