package redis

import (
	"hash/maphash"
	"slices"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// decideArgs returns the arguments of decide.lua for requests: each
// distinct limit of their buckets once, each distinct shape of request
// once (its buckets' limits and hits), then per request its shape's index
// (and its time, if any request has its own). keys are the requests'
// buckets' keys in turn: the script must know whether one repeats. A call's requests are most
// often of a few shapes: the arguments are then about one per request, not
// five per bucket, and Redis parses the numbers of each limit and shape
// once per call.
func decideArgs(now int64, keys []string, reqs []scriptRequest) []string {
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
			i := findLimit(limits, b, r.ref)
			if i < 0 {
				i = len(limits)
				limits = append(limits, scriptLimitOf(b, r.ref))
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
	// The arguments' text and where each ends, on the stack for most calls
	// (only the strings made of them are kept): appended to by value, as a
	// store through a pointer would move them to the heap.
	var (
		textArr [768]byte
		endsArr [96]int
	)
	text, ends := textArr[:0], endsArr[:0]
	if n := 5 + 6*len(limits) + len(shapes) + 2*len(reqs); n > len(endsArr) {
		text, ends = make([]byte, 0, 12*n), make([]int, 0, n)
	}
	text, ends = appendTime(text, ends, now)
	text, ends = appendArg(text, ends, int64(len(reqs)))
	flags := int64(0)
	if timed {
		flags |= 1
	}
	if len(reqs) > 1 && repeats(keys) {
		flags |= 2
	}
	text, ends = appendArg(text, ends, flags)
	text, ends = appendArg(text, ends, int64(len(limits)))
	for _, l := range limits {
		text, ends = appendArg(text, ends, l.kind)
		for _, v := range l.p[:l.n] {
			text, ends = appendArg(text, ends, v)
		}
	}
	text, ends = appendArg(text, ends, int64(len(starts)))
	for _, v := range shapes {
		text, ends = appendArg(text, ends, v)
	}
	for i, r := range reqs {
		if timed {
			text, ends = appendTime(text, ends, r.at)
		}
		text, ends = appendArg(text, ends, int64(shapeOf[i]+1))
	}
	return argStrings(text, ends)
}

// repeats reports whether a key is there twice, or may be: keys past 128
// are not looked at, and two keys whose hashes are equal count as one.
func repeats(keys []string) bool {
	if len(keys) > 128 {
		return true
	}
	var seen [256]uint64 // open addressing on the hashes; 0 is empty
	for _, k := range keys {
		h := maphash.String(seed, k) | 1
		for i := h % uint64(len(seen)); ; i = (i + 1) % uint64(len(seen)) {
			if seen[i] == h {
				return true
			}
			if seen[i] == 0 {
				seen[i] = h
				break
			}
		}
	}
	return false
}

var seed = maphash.MakeSeed()

// appendArg appends a numeric argument to text, and where it ends to ends.
func appendArg(text []byte, ends []int, v int64) ([]byte, []int) {
	text = strconv.AppendInt(text, v, 10)
	return text, append(ends, len(text))
}

// appendTime appends the time argument: t, or empty for the server's clock.
func appendTime(text []byte, ends []int, t int64) ([]byte, []int) {
	if t < 0 {
		return text, append(ends, len(text))
	}
	return appendArg(text, ends, t)
}

// argStrings returns the arguments: text cut at ends, in one allocation
// (and one for the slice).
func argStrings(text []byte, ends []int) []string {
	all := string(text)
	out := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		out[i], start = all[start:end], end
	}
	return out
}

// scriptLimit is a bucket's limit as decide.lua takes it: kind (the
// script's algorithm*2 + shadow, plus 8 for a bucket that charges always)
// and n parameters (3, or 5 for a calendar window), made from of, shadow
// and always.
type scriptLimit struct {
	kind           int64
	p              [5]int64
	n              int
	of             limit.Limit
	shadow, always bool
}

// maxSearch bounds the limits or shapes a new one is looked for among: a
// call of many distinct ones sends some twice rather than search them all.
const maxSearch = 16

// scriptLimitOf returns b's limit as decide.lua takes it, a calendar
// window's periods around the service's clock ref.
func scriptLimitOf(b limit.Bucket, ref int64) scriptLimit {
	kind := 2 * scriptAlgorithm(b.Limit)
	if b.Shadow {
		kind++
	}
	if b.Always {
		kind += 8
	}
	p, n := params(b.Limit, ref)
	return scriptLimit{kind: kind, p: p, n: n, of: b.Limit, shadow: b.Shadow, always: b.Always}
}

// findLimit returns the index of b's limit in limits, or -1. It compares
// the limits as given, not as sent: most buckets' limit is one already
// there, and its parameters need not be worked out again. A calendar
// window's must also have been sent around a ref in the same period.
func findLimit(limits []scriptLimit, b limit.Bucket, ref int64) int {
	for i := len(limits) - 1; i >= max(0, len(limits)-maxSearch); i-- {
		if l := &limits[i]; l.of == b.Limit && l.shadow == b.Shadow && l.always == b.Always && l.around(ref) {
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

// params returns the parameters decide.lua takes for a limit, and how
// many: size, drip rate and drip size of a leaky bucket; limit, resolution
// and sub-windows of a sliding window; limit, window and 0 of a fixed one;
// limit and four period bounds around ref of a calendar window
// (calendarBounds). Times are in microseconds; every limit is moved into
// its valid range, as limit.DecideAll reads it (the scripts do not check).
func params(l limit.Limit, ref int64) ([5]int64, int) {
	switch {
	case l.IsCalendar():
		b := calendarBounds(l, ref)
		return [5]int64{l.CalendarWindow().Limit, b[0], b[1], b[2], b[3]}, 5
	case l.Algorithm == limit.SlidingWindow:
		w := l.Sliding()
		return [5]int64{w.Limit, w.Resolution.Microseconds(), int64(w.SubWindows())}, 3
	case l.Algorithm == limit.FixedWindow:
		w := l.Fixed()
		return [5]int64{w.Limit, w.Window.Microseconds(), 0}, 3
	}
	b := l.Leaky().Clamped()
	return [5]int64{b.Size, b.DripRate.Microseconds(), b.DripSize}, 3
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
	a.buf, a.ends = appendArg(a.buf, a.ends, v)
}

// now adds the time argument: now, or empty for the server's clock.
func (a *scriptArgs) now(now int64) {
	a.buf, a.ends = appendTime(a.buf, a.ends, now)
}

func (a *scriptArgs) strings() []string {
	return argStrings(a.buf, a.ends)
}
