package redis

import (
	"slices"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// decideArgs returns the arguments of decide.lua for requests: each
// distinct limit of their buckets once, each distinct shape of request
// once (its buckets' limits and hits), then per request its shape's index
// (and its time, if any request has its own). A call's requests are most
// often of a few shapes: the arguments are then about one per request, not
// five per bucket, and Redis parses the numbers of each limit and shape
// once per call.
func decideArgs(now int64, reqs []scriptRequest) []string {
	var (
		limits = make([]scriptLimit, 0, 8)
		// shapes holds per shape its number of buckets, then per bucket
		// its limit's index (from 1) and its hits; starts where each begins.
		shapes  = make([]int64, 0, 32)
		starts  = make([]int, 0, 8)
		inline  [32]int
		shapeOf = inline[:0] // each request's shape
		timed   = false
	)
	if len(reqs) > len(inline) {
		shapeOf = make([]int, 0, len(reqs))
	}
	for _, r := range reqs {
		timed = timed || r.at >= 0
		start := len(shapes)
		shapes = append(shapes, int64(len(r.buckets)))
		for _, b := range r.buckets {
			l := scriptLimitOf(b)
			i := findLimit(limits, l)
			if i < 0 {
				i = len(limits)
				limits = append(limits, l)
			}
			shapes = append(shapes, int64(i+1), b.Hits)
		}
		i := findShape(shapes, starts, start)
		if i < 0 {
			i = len(starts)
			starts = append(starts, start)
		} else {
			shapes = shapes[:start]
		}
		shapeOf = append(shapeOf, i)
	}
	a := newScriptArgs(5 + 4*len(limits) + len(shapes) + 2*len(reqs))
	a.now(now)
	a.int(int64(len(reqs)))
	if timed {
		a.int(1)
	} else {
		a.int(0)
	}
	a.int(int64(len(limits)))
	for _, l := range limits {
		a.int(l.kind)
		a.int(l.p[0])
		a.int(l.p[1])
		a.int(l.p[2])
	}
	a.int(int64(len(starts)))
	for _, v := range shapes {
		a.int(v)
	}
	for i, r := range reqs {
		if timed {
			a.now(r.at)
		}
		a.int(int64(shapeOf[i] + 1))
	}
	return a.strings()
}

// scriptLimit is a limit as decide.lua takes it: kind (algorithm*2 +
// shadow, plus 6 for a bucket that charges always) and three parameters.
type scriptLimit struct {
	kind int64
	p    [3]int64
}

// maxSearch bounds the limits or shapes a new one is looked for among: a
// call of many distinct ones sends some twice rather than search them all.
const maxSearch = 16

// scriptLimitOf returns b's limit as decide.lua takes it.
func scriptLimitOf(b limit.Bucket) scriptLimit {
	kind := 2 * int64(b.Limit.Algorithm)
	if b.Shadow {
		kind++
	}
	if b.Always {
		kind += 6
	}
	return scriptLimit{kind: kind, p: params(b.Limit)}
}

// findLimit returns the index of l in limits, or -1.
func findLimit(limits []scriptLimit, l scriptLimit) int {
	for i := len(limits) - 1; i >= max(0, len(limits)-maxSearch); i-- {
		if limits[i] == l {
			return i
		}
	}
	return -1
}

// findShape returns the index of the shape that is shapes[start:] among
// the ones starts gives, which end where the next begins, or -1.
func findShape(shapes []int64, starts []int, start int) int {
	end := start
	for i := len(starts) - 1; i >= max(0, len(starts)-maxSearch); i-- {
		if slices.Equal(shapes[starts[i]:end], shapes[start:]) {
			return i
		}
		end = starts[i]
	}
	return -1
}

// params returns the three parameters decide.lua takes for a limit: size,
// drip rate and drip size of a leaky bucket; limit, resolution and
// sub-windows of a sliding window; limit, window and 0 of a fixed one.
// Times are in microseconds; every limit is moved into its valid range, as
// limit.DecideAll reads it (the scripts do not check).
func params(l limit.Limit) [3]int64 {
	switch l.Algorithm {
	case limit.SlidingWindow:
		w := l.Sliding()
		return [3]int64{w.Limit, w.Resolution.Microseconds(), int64(w.SubWindows())}
	case limit.FixedWindow:
		w := l.Fixed()
		return [3]int64{w.Limit, w.Window.Microseconds(), 0}
	}
	b := l.Leaky().Clamped()
	return [3]int64{b.Size, b.DripRate.Microseconds(), b.DripSize}
}

// scriptArgs formats a script's numeric arguments into one buffer, made
// into strings with one allocation: formatting (or boxing) each number on
// its own would allocate it.
type scriptArgs struct {
	buf  []byte
	ends []int
}

func newScriptArgs(n int) *scriptArgs {
	return &scriptArgs{buf: make([]byte, 0, 12*n), ends: make([]int, 0, n)}
}

func (a *scriptArgs) int(v int64) {
	a.buf = strconv.AppendInt(a.buf, v, 10)
	a.ends = append(a.ends, len(a.buf))
}

// now adds the time argument: now, or empty for the server's clock.
func (a *scriptArgs) now(now int64) {
	if now < 0 {
		a.ends = append(a.ends, len(a.buf))
		return
	}
	a.int(now)
}

func (a *scriptArgs) strings() []string {
	all := string(a.buf)
	out := make([]string, len(a.ends))
	start := 0
	for i, end := range a.ends {
		out[i], start = all[start:end], end
	}
	return out
}
