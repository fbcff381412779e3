package limit

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// Unit is the time unit of a requests-per-unit rate, as in envoyproxy/ratelimit
// and the RLS protocol.
type Unit int

// The units, in ascending length. Their numbering is this package's own; see
// package rls for the wire enums.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

// unitDurations follows envoyproxy/ratelimit: a month is 30 days, a year 365.
var unitDurations = [...]time.Duration{
	Second: time.Second,
	Minute: time.Minute,
	Hour:   time.Hour,
	Day:    24 * time.Hour,
	Week:   7 * 24 * time.Hour,
	Month:  30 * 24 * time.Hour,
	Year:   365 * 24 * time.Hour,
}

// Units lists every unit in ascending length.
var Units = []Unit{Second, Minute, Hour, Day, Week, Month, Year}

// Valid reports whether u is one of the defined units.
func (u Unit) Valid() bool { return u >= Second && u <= Year }

// String returns the unit's lower-case name, e.g. "minute".
func (u Unit) String() string {
	if !u.Valid() {
		return fmt.Sprintf("Unit(%d)", int(u))
	}
	return unitNames[u]
}

// Duration returns the length of one unit; 0 for an invalid unit.
func (u Unit) Duration() time.Duration {
	if !u.Valid() {
		return 0
	}
	return unitDurations[u]
}

// ErrUnknownUnit is returned by ParseUnit for a name that is not a unit.
var ErrUnknownUnit = errors.New("unknown unit")

// ParseUnit parses a unit name in any letter case ("second", "MINUTE", ...).
func ParseUnit(s string) (Unit, error) {
	for _, u := range Units {
		if strings.EqualFold(s, unitNames[u]) {
			return u, nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of second, minute, hour, day, week, month, year)", ErrUnknownUnit, s)
}

// Rate is a limit in envoyproxy/ratelimit's form: RequestsPerUnit per Unit,
// repeated as often as Multiplier units (0 or 1 for one unit).
type Rate struct {
	RequestsPerUnit uint32
	Unit            Unit
	// Multiplier is the number of units in the period; 0 means 1.
	Multiplier uint32
}

// maxPeriod caps a rate's period (unit times multiplier) at 100 years, which
// keeps the bucket's drip rate representable as a time.Duration.
const maxPeriod = 100 * 365 * 24 * int64(time.Hour/time.Microsecond)

// period returns the length of the rate's period in microseconds, at most
// maxPeriod.
func (r Rate) period() int64 {
	m := int64(r.Multiplier)
	if m == 0 {
		m = 1
	}
	u := r.Unit.Duration().Microseconds()
	if u > 0 && m > maxPeriod/u {
		return maxPeriod
	}
	return u * m
}

// minDripRate is the shortest drip Rate.Limit chooses, so that rounding a
// drip to whole microseconds changes the rate by at most 0.05%.
const minDripRate = 1000 // microseconds

// Limit translates r to a leaky bucket: Size is RequestsPerUnit and the bucket
// leaks RequestsPerUnit per period, one request at a time where the drip stays
// at or above a millisecond (100/minute: one every 600ms), in bigger drips
// otherwise. A rate of 0 is a bucket of size 0 that rejects everything.
// The unit must be valid.
func (r Rate) Limit() Limit {
	period := r.period()
	if period <= 0 {
		period = time.Second.Microseconds()
	}
	n := int64(r.RequestsPerUnit)
	if n == 0 {
		return Limit{Size: 0, DripRate: time.Duration(period) * time.Microsecond, DripSize: 1}
	}
	// dripSize * period / n is the drip; pick the smallest dripSize that
	// keeps it at or above minDripRate. dripSize <= n because period >= 1s.
	dripSize := (minDripRate*n + period - 1) / period
	if dripSize < 1 {
		dripSize = 1
	}
	drip := (dripSize*period + n/2) / n // rounded to the nearest microsecond
	if drip < 1 {
		drip = 1
	}
	return Limit{Size: n, DripRate: time.Duration(drip) * time.Microsecond, DripSize: dripSize}
}

// LimitAs translates r to a limit of algorithm a: Rate.Limit for the leaky
// bucket; for a window, RequestsPerUnit in a window of the rate's period
// (unit times multiplier), a sliding window's resolution a tenth of it.
func (r Rate) LimitAs(a Algorithm) Limit {
	if a != SlidingWindow && a != FixedWindow {
		return r.Limit()
	}
	w := time.Duration(r.period()) * time.Microsecond
	if w <= 0 {
		w = time.Second
	}
	// At most the longest window, in tenths of whole microseconds.
	longest := window.MaxWindow / (10 * time.Microsecond) * (10 * time.Microsecond)
	l := Limit{Algorithm: a, Size: int64(r.RequestsPerUnit), Window: min(w, longest)}
	if a == SlidingWindow {
		l.Resolution = l.Window / 10
	}
	return l
}

// String formats r as "100/minute" or "5/10 second".
func (r Rate) String() string {
	if r.Multiplier > 1 {
		return fmt.Sprintf("%d/%d %s", r.RequestsPerUnit, r.Multiplier, r.Unit)
	}
	return fmt.Sprintf("%d/%s", r.RequestsPerUnit, r.Unit)
}

// PerSecond is the rate l sustains, in requests per second: a leaky
// bucket's drip, a window's limit over its length, a calendar window's
// over its nominal period (Rate's: a month is 30 days).
func (l Limit) PerSecond() float64 {
	var n float64
	var per time.Duration
	switch {
	case l.IsCalendar():
		r := l.Rate()
		n, per = float64(r.RequestsPerUnit), r.Unit.Duration()
	case l.Algorithm == SlidingWindow:
		n, per = float64(l.Size), l.Sliding().Window
	case l.Algorithm == FixedWindow:
		n, per = float64(l.Size), l.Fixed().Window
	default:
		b := l.Leaky().Clamped()
		n, per = float64(b.DripSize), b.DripRate
	}
	if per <= 0 {
		return 0
	}
	return n / per.Seconds()
}

// Rate expresses l as requests per unit, for the RLS response's current_limit,
// which has no field for a bucket. When the bucket drains from full in one
// unit (within 0.1%), it is Size per that unit, the exact inverse of
// Rate.Limit. Otherwise it is the rate at which the bucket leaks, in the
// shortest unit where that is a whole number (within 1%) of at least one.
//
// A window's rate is Size per Window, in the longest unit of which the
// window is a whole number (100 per 10m is 100 per 10 minutes), or per
// second, scaled, for a window of no whole seconds. A calendar window's
// is its limit per its period: 2000000 per month.
func (l Limit) Rate() Rate {
	if l.IsCalendar() {
		return calendarRate(l)
	}
	if l.Algorithm == SlidingWindow || l.Algorithm == FixedWindow {
		return windowRate(l)
	}
	b := l.Leaky().Clamped()
	rate := b.DripRate.Microseconds()
	if b.Size == 0 {
		return Rate{RequestsPerUnit: 0, Unit: Second}
	}
	drain := float64(ceilDiv(b.Size, b.DripSize)) * float64(rate)
	for _, u := range Units {
		d := float64(u.Duration().Microseconds())
		if math.Abs(drain-d) <= d/1000 && b.Size <= math.MaxUint32 {
			return Rate{RequestsPerUnit: uint32(b.Size), Unit: u}
		}
	}
	for _, u := range Units {
		v := float64(b.DripSize) * float64(u.Duration().Microseconds()) / float64(rate)
		if v < 1 {
			continue
		}
		if r := math.Round(v); math.Abs(v-r) <= v/100 || u == Year {
			return Rate{RequestsPerUnit: uint32(math.Min(r, math.MaxUint32)), Unit: u}
		}
	}
	return Rate{RequestsPerUnit: 1, Unit: Year} // leaks less than once a year
}

// windowRate is Rate for a window.
func windowRate(l Limit) Rate {
	n := uint32(min(max(l.Size, 0), math.MaxUint32))
	w := clampWindow(l.Window)
	for i := len(Units) - 1; i >= 0; i-- {
		u := Units[i]
		if d := u.Duration(); w%d == 0 && int64(w/d) <= math.MaxUint32 {
			r := Rate{RequestsPerUnit: n, Unit: u}
			if m := uint32(w / d); m > 1 {
				r.Multiplier = m
			}
			return r
		}
	}
	perSecond := math.Round(float64(l.Size) * float64(time.Second) / float64(w))
	return Rate{RequestsPerUnit: uint32(min(perSecond, math.MaxUint32)), Unit: Second}
}

// ceilDiv returns ceil(a/b) for a >= 0, b >= 1, without overflow.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
