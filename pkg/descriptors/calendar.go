package descriptors

import (
	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// fileCalendar is what a file says next to domain about its rate_limit
// blocks: calendar: true counts those of a day or more on the calendar,
// in the time zone time_zone ("" is UTC).
type fileCalendar struct {
	on      bool
	zone    string
	zoneKey *yaml.Node // when given, for problems
}

// checkFileCalendar reports a file's time_zone without calendar: true.
func (r *reader) checkFileCalendar(c fileCalendar) {
	if c.zoneKey != nil && !c.on {
		fp := fieldPath{name: "time_zone"}
		r.errorf(c.zoneKey, &fp, "needs calendar: true beside it: it is the zone of the file's calendar rate_limit blocks (a fixed_window names its own)")
	}
}

// timeZone reads a time zone's IANA name, as a limit keeps it: "" for UTC.
func (r *reader) timeZone(n *yaml.Node, p *fieldPath) (string, bool) {
	s, ok := r.text(n, p)
	switch {
	case !ok:
		return "", false
	case s == "":
		r.errorf(n, p, "is empty: name a zone such as Europe/Berlin, or leave the field out for UTC")
		return "", false
	}
	if _, err := window.LoadZone(s); err != nil {
		r.errorf(n, p, "%q is not a time zone: want an IANA name such as Europe/Berlin, America/New_York or UTC (the names are case-sensitive)", clip(s))
		return "", false
	}
	if s == "UTC" {
		s = "" // one limit, however it is written
	}
	return s, true
}

// refuseCalendar reports calendar and time_zone in a limit that is not a
// fixed window (what says why: "a leaky bucket leaks continuously"), and whether
// there were any. Its other fields are then left unread.
func (r *reader) refuseCalendar(f field, p *fieldPath, what string) bool {
	n := deref(f.value)
	if n.Kind != yaml.MappingNode {
		return false
	}
	found := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if k.Kind == yaml.ScalarNode && (k.Value == "calendar" || k.Value == "time_zone") {
			fp := p.field(k.Value)
			r.errorf(k, &fp, "applies to fixed windows only: %s, with no period to align on the calendar; for a budget per day, week, month or year write fixed_window: {limit: N, calendar: month, time_zone: ...}", what)
			found = true
		}
	}
	return found
}

// finishFixed makes a fixed window of what was read: a window or a
// calendar period, not both, and a time zone only with a calendar.
func (r *reader) finishFixed(f field, p *fieldPath, lr *limitReading, w *windowReading) bool {
	switch {
	case w.calendarKey != nil && w.windowNode != nil:
		fp := p.field("calendar")
		r.errorf(w.calendarKey, &fp, "is given with window (line %d): a calendar window lasts its period (a day can be 23 or 25 hours, a month 28 to 31 days); give one of them", w.windowNode.Line)
	case w.calendarKey == nil && w.windowNode == nil:
		fp := p.field("window")
		r.errorf(f.value, &fp, "is required (or calendar: day, week, month or year)")
	case w.zoneKey != nil && w.calendarKey == nil:
		fp := p.field("time_zone")
		r.errorf(w.zoneKey, &fp, "needs calendar (day, week, month or year): a window of %s is counted since the Unix epoch, alike in every zone", w.window)
	default:
		lr.limit = &limit.Limit{Algorithm: limit.FixedWindow, Size: w.limit, Window: w.window, Calendar: w.calendar, Zone: w.zone}
		return true
	}
	return false
}

// rateCalendar returns a rate_limit's calendar window when it is one: it
// says calendar: true, or its file does and it is of a day or more (its
// own calendar and time_zone beat the file's); a zero Limit when it counts
// since the epoch, as envoyproxy/ratelimit does (a month of 30 days).
func (r *reader) rateCalendar(p *fieldPath, rr *rateReading) (limit.Limit, bool) {
	on, zone := r.calendar.on, r.calendar.zone
	if rr.calendarKey != nil {
		on = rr.calendar
	}
	if rr.zoneKey != nil {
		zone = rr.zone
	}
	_, long := limit.CalendarOf(rr.rate.Unit)
	unit := rr.rate.Unit
	one := "a " + unit.String()
	if unit == limit.Hour {
		one = "an hour"
	}
	switch {
	case rr.calendarKey != nil && rr.calendar && !long:
		fp := p.field("calendar")
		r.errorf(rr.calendarKey, &fp, "needs a unit of day, week, month or year: %s is as long wherever it falls, with no calendar period to align it on", one)
	case rr.zoneKey != nil && !long:
		fp := p.field("time_zone")
		r.errorf(rr.zoneKey, &fp, "has no effect: %s is counted since the Unix epoch, alike in every zone (only a day, week, month or year is counted on the calendar)", one)
	case rr.zoneKey != nil && !on:
		fp := p.field("time_zone")
		r.errorf(rr.zoneKey, &fp, "needs calendar: true, here or next to domain: without it %s is counted in windows since the Unix epoch, alike in every zone", one)
	case !on || !long:
		return limit.Limit{}, true
	case rr.rate.Multiplier > 1:
		fp := p.field("unit_multiplier")
		how := "set calendar: false here"
		if rr.calendarKey != nil {
			how = "leave calendar out"
		}
		r.errorf(rr.multiplier, &fp, "%d with calendar: true: a calendar period is one %s (%s to count windows of %d %ss since the Unix epoch)", rr.rate.Multiplier, unit, how, rr.rate.Multiplier, unit)
	default:
		l, _ := rr.rate.CalendarLimit(zone)
		return l, true
	}
	return limit.Limit{}, false
}

// describeCalendar fills in a calendar window's period and zone.
func describeCalendar(d *LimitDescription, l limit.Limit) {
	d.Limit, d.Calendar, d.TimeZone = &l.Size, l.Calendar.String(), l.ZoneName()
}
