package rls

import (
	"math"
	"slices"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// work is the scratch space of one request, reused across requests.
type work struct {
	storeFailed bool // the store call failed: its buckets may still be read
	entries     []descriptors.Entry
	levels      []descriptors.Level
	starts      []int // levels of descriptor i: levels[starts[i]:starts[i+1]]
	bucketOf    []int // bucket index of each level
	buckets     []limit.Bucket
	results     []limit.Result
	skipped     []bool         // buckets not decided: the cache rejected the request first
	index       map[string]int // bucket of each key, once there are more than scanBuckets
	// unlimited marks the allow-listed descriptors, answered with the
	// most a limit_remaining holds, as envoyproxy/ratelimit answers them.
	unlimited []bool
	hits      []int64   // each descriptor's hits, for the observer
	verdicts  []verdict // each descriptor's, once the response is made
	// quota marks the buckets of quota-mode limits: the store sees them
	// as shadow buckets, which never reject, and the service decides what
	// their being over means for the request.
	quota []bool
	now   time.Time // the instant the request is decided at
}

// scanBuckets is how many buckets addBucket searches one by one; beyond, a
// map keeps the work per request linear in its size.
const scanBuckets = 8

func (w *work) reset() {
	clear(w.levels) // drop references to keys and rules
	clear(w.buckets)
	w.entries, w.levels, w.starts, w.unlimited, w.hits = w.entries[:0], w.levels[:0], w.starts[:0], w.unlimited[:0], w.hits[:0]
	w.bucketOf, w.buckets, w.results, w.skipped = w.bucketOf[:0], w.buckets[:0], w.results[:0], w.skipped[:0]
	w.quota = w.quota[:0]
	clear(w.verdicts) // drop references to rules
	w.verdicts = w.verdicts[:0]
	clear(w.index)
}

// modes are the service's settings that apply to every limit: global
// shadow mode and global quota mode.
type modes struct{ shadow, quota bool }

// resolve walks each descriptor of req through domain d and gathers the
// buckets of its levels: levels of replaced limits are dropped, and a
// bucket reached by several descriptors is one bucket with all their hits.
// m.shadow puts every bucket in shadow mode, m.quota every limit in quota
// mode.
func (w *work) resolve(d *descriptors.Domain, req *rlsv3.RateLimitRequest, m modes) {
	w.starts = append(w.starts, 0)
	for _, desc := range req.GetDescriptors() {
		w.entries = entriesOf(desc, w.entries[:0])
		before := len(w.levels)
		w.levels = d.Resolve(w.entries, overrideOf(d, desc), w.levels)
		w.starts = append(w.starts, len(w.levels))
		// No level: unknown to the config, or allow-listed (a second walk,
		// only then).
		w.unlimited = append(w.unlimited, len(w.levels) == before && d.Unlimited(w.entries))
	}
	w.gather(d, req, m)
}

// explain is resolve, recording each descriptor's walk (for Explain): its
// levels are the walk's, and the buckets are gathered alike.
func (w *work) explain(d *descriptors.Domain, req *rlsv3.RateLimitRequest, m modes) []descriptors.Walk {
	walks := make([]descriptors.Walk, 0, len(req.GetDescriptors()))
	w.starts = append(w.starts, 0)
	for _, desc := range req.GetDescriptors() {
		walk := d.Explain(entriesOf(desc, nil), overrideOf(d, desc))
		walks = append(walks, walk)
		w.levels = append(w.levels, walk.Levels...)
		w.starts = append(w.starts, len(w.levels))
		w.unlimited = append(w.unlimited, walk.Unlimited)
	}
	w.gather(d, req, m)
	return walks
}

// overrideOf returns the rule of a limit Envoy sent with a descriptor, or
// nil.
func overrideOf(d *descriptors.Domain, desc *ratelimitv3.RateLimitDescriptor) *descriptors.Rule {
	if o := desc.GetLimit(); o != nil {
		return overrideRule(o, d)
	}
	return nil
}

// gather makes the buckets of the levels resolved: levels of replaced
// limits are dropped, and a bucket reached by several descriptors is one
// bucket with all their hits.
func (w *work) gather(d *descriptors.Domain, req *rlsv3.RateLimitRequest, m modes) {
	var replaced map[string]bool
	if d.HasReplaces() {
		replaced = replacedNames(w.levels)
	}
	for i, desc := range req.GetDescriptors() {
		hits := hitsOf(req, desc)
		w.hits = append(w.hits, hits)
		for _, l := range w.levels[w.starts[i]:w.starts[i+1]] {
			if replaced[l.Rule.Name] {
				w.bucketOf = append(w.bucketOf, -1) // neither checked nor charged
				continue
			}
			w.bucketOf = append(w.bucketOf, w.addBucket(l, hits, m))
		}
	}
	n := len(w.buckets)
	w.results = slices.Grow(w.results, n)[:n]
	w.skipped = slices.Grow(w.skipped, n)[:n]
	clear(w.skipped)
}

// replacedNames returns the names of the limits that limits of the request
// replace (envoyproxy/ratelimit's replaces): those levels are dropped.
func replacedNames(levels []descriptors.Level) map[string]bool {
	var names map[string]bool
	for _, l := range levels {
		for _, name := range l.Rule.Replaces {
			if names == nil {
				names = map[string]bool{}
			}
			names[name] = true
		}
	}
	return names
}

// addBucket returns the index of the level's bucket in w.buckets, adding
// it, or adding the hits to it when another descriptor of the request
// already uses it, so a bucket is charged once with all its hits.
func (w *work) addBucket(l descriptors.Level, hits int64, m modes) int {
	if i, ok := w.find(l.Key); ok {
		w.buckets[i].Hits = addHits(w.buckets[i].Hits, hits)
		return i
	}
	shadow := l.Rule.Shadow || m.shadow
	quota := !shadow && (l.Rule.QuotaMode || m.quota)
	w.buckets = append(w.buckets, limit.Bucket{Key: l.Key, Limit: l.Rule.Limit, Hits: hits, Shadow: shadow || quota, Always: l.Rule.Always,
		SecondUnit: l.Rule.SecondUnit(), Regional: l.Rule.Regional})
	w.quota = append(w.quota, quota)
	i := len(w.buckets) - 1
	switch {
	case i == scanBuckets:
		if w.index == nil {
			w.index = make(map[string]int)
		}
		for j, b := range w.buckets {
			w.index[b.Key] = j
		}
	case i > scanBuckets:
		w.index[l.Key] = i
	}
	return i
}

// shadow reports whether bucket k is in shadow mode (decided and counted,
// never shown), as opposed to a quota bucket, which the store also never
// lets reject.
func (w *work) shadow(k int) bool { return w.buckets[k].Shadow && !w.quota[k] }

// find returns the index of the bucket with key.
func (w *work) find(key string) (int, bool) {
	if len(w.buckets) > scanBuckets {
		i, ok := w.index[key]
		return i, ok
	}
	for i := range w.buckets {
		if w.buckets[i].Key == key {
			return i, true
		}
	}
	return 0, false
}

// addHits adds without overflowing.
func addHits(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}
