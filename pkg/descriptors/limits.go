package descriptors

import (
	"fmt"
	"math"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// rawLimit is one limit of a descriptor as written: the descriptor's one
// limit, or an item of its limits list.
type rawLimit struct {
	limit  limit.Limit
	rate   *limit.Rate // the limit as written in rate_limit form, if it was
	name   string
	shadow bool
	item   int // its index in the descriptor's limits list; -1 for the one-limit form
	// replaces names the limits this one replaces, written on lines
	// replacesLines.
	replaces      []string
	replacesLines []int
}

// limitReading gathers what a descriptor (in the one-limit form) or an item
// of its limits list says about one limit, field by field.
type limitReading struct {
	algorithms []field // the algorithm fields given: exactly one is wanted
	limit      *limit.Limit
	rate       *limit.Rate
	name       string
	rateName   *yaml.Node // rate_limit's own name field, to agree with name
	shadow     bool
	unlimited  *yaml.Node // the unlimited field, when it is true
	replaces   []string
	lines      []int
}

// algorithmFields are the fields that each give a limit.
var algorithmFields = []string{"leaky_bucket", "sliding_window", "fixed_window", "rate_limit"}

// limitFields are the fields of a limit, as an item of limits or on a
// descriptor: one algorithm, a name and shadow mode.
func limitFields[T any](reading func(T) *limitReading) []objectField[T] {
	return []objectField[T]{
		fieldOf("leaky_bucket", func(r *reader, f field, p *fieldPath, into T) bool { return r.leakyBucket(f, p, reading(into)) }),
		fieldOf("sliding_window", func(r *reader, f field, p *fieldPath, into T) bool { return r.slidingWindow(f, p, reading(into)) }),
		fieldOf("fixed_window", func(r *reader, f field, p *fieldPath, into T) bool { return r.fixedWindow(f, p, reading(into)) }),
		fieldOf("rate_limit", func(r *reader, f field, p *fieldPath, into T) bool { return r.rateLimit(f, p, reading(into)) }),
		fieldOf("name", func(r *reader, f field, p *fieldPath, into T) bool {
			var ok bool
			reading(into).name, ok = r.text(f.value, p)
			return ok
		}),
		fieldOf("shadow_mode", func(r *reader, f field, p *fieldPath, into T) bool {
			var ok bool
			reading(into).shadow, ok = r.boolean(f.value, p)
			return ok
		}),
	}
}

var itemObject = newObject(limitFields(func(l *limitReading) *limitReading { return l })...)

// limitsList reads a descriptor's limits list.
func (r *reader) limitsList(f field, p *fieldPath, d *rawNode) bool {
	items, ok := r.sequence(f.value, p)
	if ok && len(items) == 0 {
		r.errorf(f.value, p, "is empty: give at least one limit, or leave the field out")
		return false
	}
	for i, item := range items {
		ip := p.item(i)
		var lr limitReading
		var buf fieldsBuf
		if _, iok := itemObject.read(r, item, &ip, &lr, buf[:0]); !iok {
			ok = false
			continue
		}
		if l := r.finishLimit(deref(item), &ip, &lr, i); l != nil {
			d.limits = append(d.limits, l)
		} else {
			ok = false
		}
	}
	return ok
}

// finishLimit checks that a limit has exactly one algorithm and that its
// names agree, and returns it; nil when it has none (an item of limits
// must have one) or is unusable.
func (r *reader) finishLimit(n *yaml.Node, p *fieldPath, lr *limitReading, item int) *rawLimit {
	switch len(lr.algorithms) {
	case 0:
		if item >= 0 {
			r.errorf(n, p, "needs a limit: one of leaky_bucket, sliding_window, fixed_window or rate_limit")
		}
		return nil
	case 1:
	default:
		first, second := lr.algorithms[0], lr.algorithms[1]
		hint := "give one, or list several under limits"
		if item >= 0 {
			hint = "give one per item of limits"
		}
		r.errorf(second.key, p, "has both %s (line %d) and %s: %s", first.name, first.key.Line, second.name, hint)
		return nil
	}
	if lr.rateName != nil && lr.name != "" && lr.name != lr.rateName.Value {
		rp := p.field("rate_limit")
		fp := rp.field("name")
		whose := "descriptor"
		if item >= 0 {
			whose = "item"
		}
		r.errorf(lr.rateName, &fp, "is %q but the %s's name is %q: give one name", clip(lr.rateName.Value), whose, clip(lr.name))
		return nil
	}
	if lr.rateName != nil && lr.name == "" {
		lr.name = lr.rateName.Value
	}
	if lr.unlimited != nil && item >= 0 {
		rp := p.field("rate_limit")
		fp := rp.field("unlimited")
		r.errorf(lr.unlimited, &fp, "cannot be an item of limits: put rate_limit: {unlimited: true} on the descriptor itself")
		return nil
	}
	if lr.limit == nil {
		return nil // unusable, and said so, or unlimited
	}
	return &rawLimit{limit: *lr.limit, rate: lr.rate, name: lr.name, shadow: lr.shadow, item: item,
		replaces: lr.replaces, replacesLines: lr.lines}
}

type leakyReading struct{ l limit.Limit }

var leakyObject = newObject(
	requiredField("size", func(r *reader, f field, p *fieldPath, lb *leakyReading) bool {
		var ok bool
		lb.l.Size, ok = r.integer(f.value, p, 0, leaky.MaxSize)
		return ok
	}),
	requiredField("drip_rate", func(r *reader, f field, p *fieldPath, lb *leakyReading) bool {
		var ok bool
		lb.l.DripRate, ok = r.micros(f.value, p, leaky.MaxDripRate)
		return ok
	}),
	fieldOf("drip_size", func(r *reader, f field, p *fieldPath, lb *leakyReading) bool {
		var ok bool
		lb.l.DripSize, ok = r.integer(f.value, p, 1, leaky.MaxSize)
		return ok
	}),
)

func (r *reader) leakyBucket(f field, p *fieldPath, lr *limitReading) bool {
	lr.algorithms = append(lr.algorithms, f)
	if r.refuseCalendar(f, p, "a leaky bucket leaks continuously") {
		return false
	}
	lb := leakyReading{l: limit.Limit{DripSize: 1}}
	var buf fieldsBuf
	if _, ok := leakyObject.read(r, f.value, p, &lb, buf[:0]); !ok {
		return false
	}
	lr.limit = &lb.l
	return true
}

// windowReading is a window as written: its fields, and the nodes of the
// ones a problem may name.
type windowReading struct {
	limit               int64
	window, resolution  time.Duration
	windowNode, resNode *yaml.Node
	// A fixed window's calendar period and time zone, and their keys.
	calendar             window.Calendar
	zone                 string
	calendarKey, zoneKey *yaml.Node
}

var (
	limitField = requiredField("limit", func(r *reader, f field, p *fieldPath, w *windowReading) bool {
		var ok bool
		w.limit, ok = r.integer(f.value, p, 0, window.MaxLimit)
		return ok
	})
	readWindow = func(r *reader, f field, p *fieldPath, w *windowReading) bool {
		var ok bool
		w.windowNode = f.value
		w.window, ok = r.micros(f.value, p, window.MaxWindow)
		return ok
	}
	// A fixed window's window is required unless it has a calendar
	// (checked once both are read).
	fixedObject = newObject(limitField, fieldOf("window", readWindow),
		fieldOf("calendar", func(r *reader, f field, p *fieldPath, w *windowReading) bool {
			w.calendarKey = f.key
			s, ok := r.text(f.value, p)
			if !ok {
				return false
			}
			var err error
			if w.calendar, err = window.ParseCalendar(s); err != nil {
				r.errorf(f.value, p, "%q: want day, week (from Monday), month or year", clip(s))
				return false
			}
			return true
		}),
		fieldOf("time_zone", func(r *reader, f field, p *fieldPath, w *windowReading) bool {
			w.zoneKey = f.key
			var ok bool
			w.zone, ok = r.timeZone(f.value, p)
			return ok
		}))
	slidingObject = newObject(limitField, requiredField("window", readWindow),
		fieldOf("resolution", func(r *reader, f field, p *fieldPath, w *windowReading) bool {
			var ok bool
			w.resNode = f.value
			w.resolution, ok = r.micros(f.value, p, window.MaxWindow)
			return ok
		}))
)

func (r *reader) fixedWindow(f field, p *fieldPath, lr *limitReading) bool {
	return r.window(f, p, lr, limit.FixedWindow)
}

func (r *reader) slidingWindow(f field, p *fieldPath, lr *limitReading) bool {
	return r.window(f, p, lr, limit.SlidingWindow)
}

// window reads a fixed or a sliding window; a sliding window's resolution
// must divide it into at most window.MaxSubWindows.
func (r *reader) window(f field, p *fieldPath, lr *limitReading, algo limit.Algorithm) bool {
	lr.algorithms = append(lr.algorithms, f)
	obj := fixedObject
	if algo == limit.SlidingWindow {
		obj = slidingObject
	}
	if algo == limit.SlidingWindow && r.refuseCalendar(f, p, "a sliding window slides continuously") {
		return false
	}
	var w windowReading
	var buf fieldsBuf
	if _, ok := obj.read(r, f.value, p, &w, buf[:0]); !ok {
		return false
	}
	if algo == limit.FixedWindow {
		return r.finishFixed(f, p, lr, &w)
	}
	res, resNode, resField := w.resolution, w.resNode, p.field("resolution")
	if resNode == nil {
		res, resNode, resField = w.window/10, w.windowNode, p.field("window")
		if res%time.Microsecond != 0 || res == 0 {
			r.errorf(resNode, &resField, "%s has no default resolution (a tenth of the window is not a whole number of microseconds): give resolution", w.window)
			return false
		}
	}
	switch {
	case w.window%res != 0:
		r.errorf(resNode, &resField, "%s does not divide the window %s: a window is a whole number of sub-windows", res, w.window)
		return false
	case w.window/res > window.MaxSubWindows:
		r.errorf(resNode, &resField, "makes %d sub-windows of %s: at most %d (each costs memory in every bucket); give a longer resolution",
			w.window/res, res, window.MaxSubWindows)
		return false
	}
	lr.limit = &limit.Limit{Algorithm: limit.SlidingWindow, Size: w.limit, Window: w.window, Resolution: w.resolution}
	return true
}

// rateReading is a rate_limit as written.
type rateReading struct {
	lr          *limitReading
	rate        limit.Rate
	unit, count *yaml.Node // the unit and requests_per_unit fields, when given
	// calendar and zone, when given (calendarKey, zoneKey), say whether a
	// unit of a day or more is counted on the calendar, and where.
	calendar             bool
	zone                 string
	calendarKey, zoneKey *yaml.Node
	multiplier           *yaml.Node // the unit_multiplier's value, when given
}

var rateObject = newObject(
	fieldOf("unit", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		rr.unit = f.key
		s, ok := r.text(f.value, p)
		if !ok {
			return false
		}
		u, err := limit.ParseUnit(s)
		if err != nil {
			r.errorf(f.value, p, "unknown unit %q (want second, minute, hour, day, week, month or year)", clip(s))
			return false
		}
		rr.rate.Unit = u
		return true
	}),
	fieldOf("requests_per_unit", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		rr.count = f.key
		v, ok := r.integer(f.value, p, 0, math.MaxUint32)
		rr.rate.RequestsPerUnit = uint32(v)
		return ok
	}),
	fieldOf("calendar", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		rr.calendarKey = f.key
		var ok bool
		rr.calendar, ok = r.boolean(f.value, p)
		return ok
	}),
	fieldOf("time_zone", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		rr.zoneKey = f.key
		var ok bool
		rr.zone, ok = r.timeZone(f.value, p)
		return ok
	}),
	fieldOf("unit_multiplier", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		rr.multiplier = f.value
		v, ok := r.integer(f.value, p, 1, math.MaxUint32)
		rr.rate.Multiplier = uint32(v)
		return ok
	}),
	fieldOf("unlimited", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		on, ok := r.boolean(f.value, p)
		if on {
			rr.lr.unlimited = f.key
		}
		return ok
	}),
	fieldOf("name", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		name, ok := r.text(f.value, p)
		if ok && name != "" {
			rr.lr.rateName = f.value
		}
		return ok
	}),
	fieldOf("replaces", func(r *reader, f field, p *fieldPath, rr *rateReading) bool {
		return r.replaces(f.value, p, rr.lr)
	}),
)

// rateLimit reads envoyproxy/ratelimit's rate_limit block: a limit of the
// file's rate_limit_algorithm, or unlimited.
func (r *reader) rateLimit(f field, p *fieldPath, lr *limitReading) bool {
	lr.algorithms = append(lr.algorithms, f)
	rr := rateReading{lr: lr}
	var buf fieldsBuf
	_, ok := rateObject.read(r, f.value, p, &rr, buf[:0])
	switch {
	case lr.unlimited != nil:
		if rr.unit != nil || rr.count != nil || rr.calendarKey != nil || rr.zoneKey != nil {
			fp := p.field("unlimited")
			with := "unit or requests_per_unit"
			if rr.unit == nil && rr.count == nil {
				with = "calendar or time_zone"
			}
			r.errorf(lr.unlimited, &fp, "cannot be combined with %s", with)
			return false
		}
		return ok
	case !ok:
		return false
	case rr.unit == nil:
		fp := p.field("unit")
		r.errorf(f.value, &fp, "is required (or set unlimited: true)")
		return false
	case rr.count == nil:
		// envoyproxy/ratelimit reads a missing requests_per_unit as 0.
		fp := p.field("requests_per_unit")
		r.warnf(f.value, &fp, "is missing: read as 0, which rejects every request, as envoyproxy/ratelimit does")
	}
	l, ok := r.rateCalendar(p, &rr)
	if !ok {
		return false
	}
	if !l.IsCalendar() {
		l = rr.rate.LimitAs(r.algorithm)
	}
	lr.limit, lr.rate = &l, &rr.rate
	return true
}

var replacesObject = newObject(
	requiredField("name", func(r *reader, f field, p *fieldPath, lr *limitReading) bool {
		name, ok := r.text(f.value, p)
		if ok && name == "" {
			r.errorf(f.value, p, "must not be empty")
			ok = false
		}
		lr.replaces = append(lr.replaces, name)
		lr.lines = append(lr.lines, f.value.Line)
		r.hasReplaces = true
		return ok
	}),
)

// replaces reads envoyproxy/ratelimit's replaces list, [{name: ...}], with
// the names' lines.
func (r *reader) replaces(n *yaml.Node, p *fieldPath, lr *limitReading) bool {
	items, ok := r.sequence(n, p)
	for i, item := range items {
		ip := p.item(i)
		var buf fieldsBuf
		if _, iok := replacesObject.read(r, item, &ip, lr, buf[:0]); !iok {
			ok = false
		}
	}
	return ok
}

// micros reads a duration that is a whole number of microseconds, at most
// longest.
func (r *reader) micros(n *yaml.Node, p *fieldPath, longest time.Duration) (time.Duration, bool) {
	d, ok := r.duration(n, p)
	switch {
	case !ok:
		return 0, false
	case d%time.Microsecond != 0:
		r.errorf(n, p, "must be a whole number of microseconds, got %s", clip(n.Value))
		return 0, false
	case d > longest:
		r.errorf(n, p, "must be at most %s, got %s", longest, clip(n.Value))
		return 0, false
	}
	return d, true
}

// describeAlgorithm is a limit's algorithm and parameters, for Describe.
func describeAlgorithm(l limit.Limit) string {
	return fmt.Sprint(l)
}
