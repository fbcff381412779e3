package redis

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// maxCallBuckets bounds the buckets of one script call: a request's
// buckets of one slot, the requests of a batch, a lease call, an undo, a
// DEL. Redis runs a script to its end and serves nobody else meanwhile:
// one call of all of a huge request's buckets (40,000, with
// -max-descriptors raised) made every other caller wait 200 to 330 ms.
// On a 2-CPU machine (BenchmarkCallSize), a call deciding 256 leaky
// buckets holds Redis about 1.1 ms, a lease call of as many 1.6 ms; of
// 512, 2.2 and 2.6 ms; of 1024, 3.7 and 5.8 ms. At 256 the longest PING
// while 40,000 buckets are decided is 2 to 4 ms, far below the 20 that
// TestHugeRequestLetsOthersIn allows on a busy machine, and the request
// takes about a third longer than in one call (417 calls in turn: 310 to
// 360 ms, against 220 to 330); 512 would save a tenth of its time, for
// calls twice as long. A sliding window counts for more than one bucket
// (callWeight).
const maxCallBuckets = 256

// callWeight is how many of a call's maxCallBuckets a bucket of limit l
// counts for. A leaky bucket or a fixed window costs Redis about 3 µs in a
// call, a sliding window 4 µs plus 0.2 µs per sub-window it counts (256
// windows of 1,000 counted sub-windows held Redis 55 ms): one more per 12
// sub-windows.
func callWeight(l limit.Limit) int {
	if l.Algorithm != limit.SlidingWindow {
		return 1
	}
	return 1 + l.Sliding().SubWindows()/12
}

// callWeights is the sum of the buckets' callWeight; it stops counting
// past maxCallBuckets.
func callWeights(buckets []limit.Bucket) int {
	w := 0
	for i := range buckets {
		if w += callWeight(buckets[i].Limit); w > maxCallBuckets {
			break
		}
	}
	return w
}

// split groups a request's buckets into runs, one per place (server and
// slot), each cut into parts of at most maxCallBuckets (cut), each decided
// by one call; it returns the runs' places too.
func (s *Store) split(keys []string, buckets []limit.Bucket) ([][]*part, []place) {
	where := s.places(keys, func(i int) bool { return buckets[i].SecondUnit })
	return cut(where, func(i int) int { return callWeight(buckets[i].Limit) },
		func(p *part, i int) { p.add(i, keys[i], buckets[i]) })
}

// cut groups items by where they live, where[i] (one run per place: one
// in all on a single Redis), and cuts each run, in the items' order, into
// calls of at most maxCallBuckets by weight, but of one item at least;
// add puts item i in a call. It returns the runs and their places.
func cut[T any](where []place, weight func(i int) int, add func(c *T, i int)) ([][]*T, []place) {
	type open struct{ run, weight int }
	var runs [][]*T
	var places []place
	byPlace := map[place]*open{}
	for i, p := range where {
		o := byPlace[p]
		if o == nil {
			o = &open{run: len(runs)}
			byPlace[p] = o
			runs = append(runs, nil)
			places = append(places, p)
		}
		w := weight(i)
		if len(runs[o.run]) == 0 || o.weight+w > maxCallBuckets {
			runs[o.run] = append(runs[o.run], new(T))
			o.weight = 0
		}
		o.weight += w
		run := runs[o.run]
		add(run[len(run)-1], i)
	}
	return runs, places
}

// runFlags are what the runs of one request tell each other.
type runFlags struct {
	rejected atomic.Bool // a part was not admitted
	failed   atomic.Bool // a call failed
}

// decideRun decides the parts of one slot in turn, as the flags of the
// whole request say. A slot's parts go one after another, not in
// parallel: they share one Redis node, which runs one script at a time,
// so parallel calls would only queue there together, and every other
// caller would wait behind all of them, not one; and once a part rejects,
// the request's answer is known, so the parts after it are sent as peeks
// (part.peek), which charge nothing to undo. Other slots' runs go in
// parallel, on their own nodes for the most part. After a failure the
// parts left are not sent: the request fails, and they would only charge
// what must then be undone.
func (s *Store) decideRun(ctx context.Context, c *clients, at when, run []*part, f *runFlags) {
	for _, p := range run {
		if f.failed.Load() {
			return
		}
		p.peek = f.rejected.Load()
		s.decidePart(ctx, c, at, p)
		switch {
		case p.err != nil:
			f.failed.Store(true)
		case !p.peek && !p.admitted():
			f.rejected.Store(true)
		}
	}
}

// decidePart sends one part: charged, with each bucket's state before, for
// undo; or as a peek, with rejector added.
func (s *Store) decidePart(ctx context.Context, c *clients, at when, p *part) {
	n := len(p.buckets)
	p.sent = true
	if !p.peek {
		p.results, p.before = make([]limit.Result, n), make([]limit.State, n)
		p.now, p.err = s.exec.run(ctx, c, at, p.keys, p.buckets, p.results, p.before)
		return
	}
	keys := append(p.keys[:n:n], p.keys[0])
	buckets := append(p.buckets[:n:n], rejector(p.buckets[0].Key))
	results := make([]limit.Result, n+1)
	p.now, p.err = s.exec.run(ctx, c, at, keys, buckets, results, nil)
	p.results = results[:n]
}

// rejector is the bucket added to a part sent once its request is known
// to be rejected: a leaky bucket of size 0 asked for a hit never has room,
// so the call decides the part as a rejected request's, by the same
// script and limit.DecideAll: each bucket shows its own figures, and only
// those that charge always are charged. It reads the part's first key
// (whatever that holds, nothing fits in 0) and is never written, as a
// rejected request's bucket that does not charge always is not.
func rejector(key string) limit.Bucket {
	return limit.Bucket{Key: key, Limit: limit.Limit{Size: 0, DripRate: time.Second, DripSize: 1}, Hits: 1}
}

// inTurn runs f on the items of each run one after another, and the runs
// in parallel.
func inTurn[T any](runs [][]T, f func(T)) {
	parallel(runs, func(run []T) {
		for _, it := range run {
			f(it)
		}
	})
}
