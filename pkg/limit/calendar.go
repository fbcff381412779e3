package limit

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// IsCalendar reports whether l is a calendar window: a fixed window over
// the calendar periods of a time zone.
func (l Limit) IsCalendar() bool {
	return l.Algorithm == FixedWindow && l.Calendar != window.NoCalendar
}

// ZoneName is l's time zone as a config names it: Zone, or "UTC".
func (l Limit) ZoneName() string {
	if l.Zone == "" {
		return "UTC"
	}
	return l.Zone
}

// validateCalendar reports a calendar or a zone where they do not belong,
// and a calendar window out of range.
func (l Limit) validateCalendar() error {
	switch {
	case l.Calendar != window.NoCalendar && l.Algorithm != FixedWindow:
		return fmt.Errorf("calendar applies to fixed windows only, not to a %s", l.Algorithm)
	case l.Zone != "" && !l.IsCalendar():
		return errors.New("time_zone applies to calendar windows only")
	case !l.IsCalendar():
		return nil
	case l.Window != 0:
		return fmt.Errorf("a calendar window has no window length, got %s", l.Window)
	}
	if _, err := window.LoadZone(l.Zone); err != nil {
		return err
	}
	return window.CalendarFixed{Limit: l.Size, Calendar: l.Calendar}.Validate()
}

// CalendarWindow returns l as a calendar window, its limit moved into its
// valid range and its zone loaded (UTC for a name that does not load);
// l must be a calendar window (IsCalendar) for it to mean anything.
func (l Limit) CalendarWindow() window.CalendarFixed {
	return window.CalendarFixed{Limit: min(max(l.Size, 0), window.MaxLimit), Calendar: l.Calendar, Zone: window.Zone(l.Zone)}
}

// FixedPeriod returns the window of the fixed window l that holds the
// instant at, Unix microseconds: a multiple of Window since the epoch, or
// a calendar window's period in its zone. A fixed window's state is of
// the window starting at its Timestamp; a lease or a debt made at one
// instant ends with its window.
func (l Limit) FixedPeriod(at int64) window.Period {
	if l.IsCalendar() {
		return l.Calendar.Period(at, window.Zone(l.Zone))
	}
	win := l.Fixed().Window.Microseconds()
	start := floorDiv(at, win) * win
	return window.Period{Start: start, End: start + win}
}

// CountedPeriod returns the period a calendar window in state s counts
// in at now: now's, or the state's when later (a clock stepped back), as
// Decide counts.
func (l Limit) CountedPeriod(s State, now time.Time) window.Period {
	return l.Calendar.Period(max(now.UnixMicro(), s.Timestamp), window.Zone(l.Zone))
}

func calendarState(s State) window.CalendarState {
	return window.CalendarState{Start: s.Timestamp, Count: s.Counter}
}

// decideCalendar is decideOne for a calendar window.
func decideCalendar(s State, l Limit, now time.Time, hits int64) Result {
	return fromWindow(l.CalendarWindow().Decide(calendarState(s), now, hits), s)
}

// chargeCalendar is charge for a calendar window.
func chargeCalendar(r *Result, l Limit, now time.Time, hits int64) {
	st := calendarState(r.State)
	l.CalendarWindow().Charge(&st, now, hits)
	r.State = State{Counter: st.Count, Timestamp: st.Start}
}

// calendarUnits pairs the units of a day or more with their calendar
// periods.
var calendarUnits = [...]struct {
	unit Unit
	cal  window.Calendar
}{{Day, window.Day}, {Week, window.Week}, {Month, window.Month}, {Year, window.Year}}

// calendarRate is Rate for a calendar window: Size per its period.
func calendarRate(l Limit) Rate {
	n := uint32(min(max(l.Size, 0), math.MaxUint32))
	u := Day // and for an unknown calendar, counted in days
	for _, cu := range calendarUnits {
		if cu.cal == l.Calendar {
			u = cu.unit
		}
	}
	return Rate{RequestsPerUnit: n, Unit: u}
}

// CalendarOf returns the calendar period of a unit of a day or more; ok
// is false for a shorter one, which is the same length whenever it falls.
func CalendarOf(u Unit) (c window.Calendar, ok bool) {
	for _, cu := range calendarUnits {
		if cu.unit == u {
			return cu.cal, true
		}
	}
	return window.NoCalendar, false
}

// CalendarLimit translates r to a calendar window: RequestsPerUnit in each
// period of the rate's unit in zone (an IANA name; "" is UTC), rather than
// in windows of its length since the epoch (where a month is 30 days). ok
// is false for a unit shorter than a day, or a multiplier above 1: a
// calendar period is one unit.
func (r Rate) CalendarLimit(zone string) (l Limit, ok bool) {
	c, ok := CalendarOf(r.Unit)
	if !ok || r.Multiplier > 1 {
		return Limit{}, false
	}
	return Limit{Algorithm: FixedWindow, Size: int64(r.RequestsPerUnit), Calendar: c, Zone: zone}, true
}
