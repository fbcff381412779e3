package window

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // the zone database, for a binary on a system without one (a scratch image)
)

// Calendar is the calendar period a fixed window may count in, in a time
// zone: a day, a week (from Monday), a month or a year, as the zone's
// clocks say, daylight saving included (a day can be 23 or 25 hours). The
// zero Calendar is none: the window is a length of time instead.
type Calendar uint8

// The calendar periods.
const (
	NoCalendar Calendar = iota
	Day
	Week
	Month
	Year
)

var calendarNames = [...]string{NoCalendar: "", Day: "day", Week: "week", Month: "month", Year: "year"}

// String returns the period's name as the config writes it, e.g. "month";
// "" for NoCalendar.
func (c Calendar) String() string {
	if int(c) < len(calendarNames) {
		return calendarNames[c]
	}
	return fmt.Sprintf("Calendar(%d)", int(c))
}

// Valid reports whether c is one of the periods.
func (c Calendar) Valid() bool { return c >= Day && c <= Year }

// ParseCalendar parses a period's name: day, week, month or year.
func ParseCalendar(s string) (Calendar, error) {
	for c := Day; c <= Year; c++ {
		if s == calendarNames[c] {
			return c, nil
		}
	}
	return NoCalendar, fmt.Errorf("unknown calendar period %q (want day, week, month or year)", s)
}

// Period is one calendar period: from Start (included) to End (excluded),
// in Unix microseconds.
type Period struct{ Start, End int64 }

// maxInstant bounds the instants Period takes, as the Redis script's
// numbers are bounded: 2^53 microseconds is some 285 years from 1970.
const maxInstant = 1 << 53

// Period returns the period of c holding the instant at (Unix
// microseconds) in loc; nil is UTC, and a c that is not Valid counts days.
// Its start is the first instant of its first local day: midnight, or
// when the clocks reach that day where they skip midnight. Period is pure.
func (c Calendar) Period(at int64, loc *time.Location) Period {
	if loc == nil {
		loc = time.UTC
	}
	at = min(max(at, -maxInstant), maxInstant)
	// Every instant of a period has that period: the last one found for
	// c and loc answers the calls until it ends (a zone's date arithmetic
	// costs a few hundred nanoseconds, on every decision).
	k := c
	if !k.Valid() {
		k = Day // what it counts
	}
	slot := &lastPeriods[k][zoneSlot(loc)]
	if last := slot.Load(); last != nil && last.loc == loc && last.Start <= at && at < last.End {
		return last.Period
	}
	p, natural := c.period(at, loc)
	if natural {
		slot.Store(&foundPeriod{loc: loc, Period: p})
	}
	return p
}

// foundPeriod is a period Period found, and the zone it is of.
type foundPeriod struct {
	loc *time.Location
	Period
}

// lastPeriods holds, per calendar and a few slots of zones, the last
// period found: the calls of a period are many, its zones few.
var lastPeriods [Year + 1][8]atomic.Pointer[foundPeriod]

// zoneSlot picks loc's slot of lastPeriods by its name.
func zoneSlot(loc *time.Location) int {
	h := uint32(2166136261)
	for _, b := range []byte(loc.String()) {
		h = (h ^ uint32(b)) * 16777619
	}
	return int(h % 8)
}

// period is Period without the cache; natural says the period is the
// calendar's own, not stretched to hold at (which only odd zone rules need).
func (c Calendar) period(at int64, loc *time.Location) (p Period, natural bool) {
	t := time.UnixMicro(at).In(loc)
	y, m, d := t.Date()
	var from, to time.Time
	switch c {
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		from, to = dayStart(y, m, d-back, loc), dayStart(y, m, d-back+7, loc)
	case Month:
		from, to = dayStart(y, m, 1, loc), dayStart(y, m+1, 1, loc)
	case Year:
		from, to = dayStart(y, 1, 1, loc), dayStart(y+1, 1, 1, loc)
	default:
		from, to = dayStart(y, m, d, loc), dayStart(y, m, d+1, loc)
	}
	p = Period{Start: from.UnixMicro(), End: to.UnixMicro()}
	natural = p.Start <= at && at < p.End
	// A period always holds at, whatever a zone's rules: the decisions
	// take its end for the time until it resets.
	p.Start, p.End = min(p.Start, at), max(p.End, at+1)
	return p, natural
}

// dayStart returns the first instant of the local day y-m-d in loc (m and
// d may be out of range, as time.Date takes them).
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if !onDay(t, y, m, d) {
		// The clocks skip midnight (forward at 00:00), and time.Date chose
		// the offset before: the day starts when the new offset does.
		if _, end := t.ZoneBounds(); !end.IsZero() && onDay(end, y, m, d) {
			t = end
		}
	}
	// The clocks went back across midnight (from 01:00 to 00:00): the day
	// has two midnights, and time.Date may have chosen the second.
	if start, _ := t.ZoneBounds(); !start.IsZero() {
		if before := start.Add(-time.Nanosecond); onDay(before, y, m, d) {
			_, off := before.Zone()
			t = time.Date(y, m, d, 0, 0, 0, 0, time.FixedZone("", off)).In(loc)
		}
	}
	return t
}

func onDay(t time.Time, y int, m time.Month, d int) bool {
	ty, tm, td := t.Date()
	return ty == y && tm == m && td == d
}

// zones caches the zones LoadZone loaded, by name: a zone is read once per
// process, and the same *time.Location is shared by every limit that names
// it. It only grows by names a config holds.
var zones sync.Map // string -> *time.Location

// ErrZone is returned by LoadZone for a name that is not a time zone.
var ErrZone = errors.New("unknown time zone")

// LoadZone returns the time zone of an IANA name such as "Europe/Berlin";
// "" and "UTC" are UTC. "Local" is refused: a limit must not depend on the
// machine it runs on. The zone database is embedded (time/tzdata), so a
// system without one loads every zone too. Safe for concurrent use.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if z, ok := zones.Load(name); ok {
		return z.(*time.Location), nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%w %q: name the zone, such as Europe/Berlin (Local is the machine's, which differs between replicas)", ErrZone, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q (want an IANA name such as Europe/Berlin or America/New_York, or UTC)", ErrZone, name)
	}
	z, _ := zones.LoadOrStore(name, loc)
	return z.(*time.Location), nil
}

// Zone returns LoadZone's zone of name, or UTC for a name that does not
// load (which a limit's Validate reports).
func Zone(name string) *time.Location {
	loc, err := LoadZone(name)
	if err != nil {
		return time.UTC
	}
	return loc
}

// CalendarFixed is a fixed window over calendar periods: at most Limit
// hits in each period of Calendar in Zone (nil is UTC). At a period's end
// the count starts again from 0, as a fixed window's at its window's end.
type CalendarFixed struct {
	// Limit is the most hits in a period; 0 admits nothing.
	Limit    int64
	Calendar Calendar
	Zone     *time.Location
}

// Validate reports the first field of l that is out of range.
func (l CalendarFixed) Validate() error {
	switch {
	case l.Limit < 0 || l.Limit > MaxLimit:
		return fmt.Errorf("limit must be 0 to %d, got %d", int64(MaxLimit), l.Limit)
	case !l.Calendar.Valid():
		return fmt.Errorf("calendar must be day, week, month or year, got %s", l.Calendar)
	}
	return nil
}

// CalendarState is a calendar window's count: Count hits in the period
// that starts at Start (Unix microseconds). The zero value is empty.
type CalendarState struct {
	Start int64
	Count int64
}

// Decide decides whether hits more fit in the period holding now: count +
// hits <= Limit. It changes nothing; Charge adds the hits. The count is
// the state's if its period is now's or later (a clock stepped back: the
// later period is counted until its end, as Fixed counts a later window),
// and otherwise 0; a state whose start is within now's period (its zone
// changed on a reload) is counted too. Reset and Clear are the time to
// the period's end. Decide is pure; l must be valid.
func (l CalendarFixed) Decide(s CalendarState, now time.Time, hits int64) Result {
	us := now.UnixMicro()
	p := l.Calendar.Period(max(us, s.Start), l.Zone)
	r, after := admit(l.Limit, l.count(s, p), hits)
	end := time.Duration(max(p.End-us, 1)) * time.Microsecond // at least 1µs: past maxInstant, periods stop
	if after > 0 {
		r.Clear = end
	}
	if !r.Admitted {
		r.Reset = end // hits over the limit never fit; the period's end is still when it starts again
	}
	r.TTL = r.Clear
	return r
}

// count is what s counts in period p, which holds s.Start or a later
// instant.
func (l CalendarFixed) count(s CalendarState, p Period) int64 {
	if s.Start < p.Start {
		return 0
	}
	return s.Count
}

// Count returns the hits the period holding now counts: more than Limit
// when a limit that charges always went past it.
func (l CalendarFixed) Count(s CalendarState, now time.Time) int64 {
	return l.count(s, l.Calendar.Period(max(now.UnixMicro(), s.Start), l.Zone))
}

// Charge adds hits to the period holding now, as Decide admitted them or
// past the limit (a limit that charges always); the count saturates at
// MaxLimit, and a refund never takes it below 0. The state then starts
// where its period does.
func (l CalendarFixed) Charge(s *CalendarState, now time.Time, hits int64) {
	p := l.Calendar.Period(max(now.UnixMicro(), s.Start), l.Zone)
	s.Start, s.Count = p.Start, l.count(*s, p)
	s.Count = min(max(s.Count+min(max(hits, -MaxLimit), MaxLimit), 0), MaxLimit)
}
