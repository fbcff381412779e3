package window

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func instant(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestPeriodSteps: the period holding an instant, in its zone, for every
// kind of edge: months of 28 to 31 days, a year's end, the two daylight
// saving changes of Europe/Berlin (a day of 23 hours and one of 25), zones
// east and west of UTC, weeks from Monday across a month's and a year's
// end, and zones whose clocks skip or repeat midnight.
func TestPeriodSteps(t *testing.T) {
	for i, c := range []struct {
		cal        Calendar
		zone, at   string
		start, end string // RFC 3339, in the zone
		hours      float64
	}{
		{Month, "UTC", "2026-02-14T12:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24},
		{Month, "UTC", "2024-02-29T23:59:59.999999Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", 29 * 24},
		{Month, "UTC", "2026-04-30T08:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", 30 * 24},
		{Month, "UTC", "2026-01-31T23:59:59.999999Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", 31 * 24},
		{Month, "UTC", "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24}, // a period starts at its first instant
		{Year, "UTC", "2026-12-31T23:30:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", 365 * 24},
		{Year, "UTC", "2027-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", 365 * 24},
		{Year, "UTC", "2028-07-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", 366 * 24},
		// Berlin springs forward on 29 March 2026 (02:00 -> 03:00) and falls
		// back on 25 October (03:00 -> 02:00).
		{Day, "Europe/Berlin", "2026-03-29T12:00:00Z", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23},
		{Day, "Europe/Berlin", "2026-10-25T12:00:00Z", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25},
		{Day, "Europe/Berlin", "2026-03-28T22:59:59Z", "2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", 24},
		{Month, "Europe/Berlin", "2026-03-31T21:59:59Z", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*24 - 1},
		{Month, "Europe/Berlin", "2026-03-31T22:00:00Z", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00", 30 * 24}, // UTC is still in March
		{Month, "Europe/Berlin", "2026-10-15T00:00:00Z", "2026-10-01T00:00:00+02:00", "2026-11-01T00:00:00+01:00", 31*24 + 1},
		{Year, "Europe/Berlin", "2026-12-31T23:30:00Z", "2027-01-01T00:00:00+01:00", "2028-01-01T00:00:00+01:00", 365 * 24},
		// East of UTC: Tokyo's April starts at 15:00 UTC on 31 March.
		{Month, "Asia/Tokyo", "2026-03-31T14:59:59Z", "2026-03-01T00:00:00+09:00", "2026-04-01T00:00:00+09:00", 31 * 24},
		{Month, "Asia/Tokyo", "2026-03-31T15:00:00Z", "2026-04-01T00:00:00+09:00", "2026-05-01T00:00:00+09:00", 30 * 24},
		{Day, "Asia/Tokyo", "2026-03-04T20:00:00Z", "2026-03-05T00:00:00+09:00", "2026-03-06T00:00:00+09:00", 24},
		// West: Los Angeles is still in March at 05:00 UTC on 1 April, and
		// springs forward on 8 March 2026.
		{Month, "America/Los_Angeles", "2026-04-01T05:00:00Z", "2026-03-01T00:00:00-08:00", "2026-04-01T00:00:00-07:00", 31*24 - 1},
		{Month, "America/Los_Angeles", "2026-04-01T07:00:00Z", "2026-04-01T00:00:00-07:00", "2026-05-01T00:00:00-07:00", 30 * 24},
		{Day, "America/Los_Angeles", "2026-03-08T20:00:00Z", "2026-03-08T00:00:00-08:00", "2026-03-09T00:00:00-07:00", 23},
		// Weeks start on Monday; 1 January 2026 is a Thursday.
		{Week, "UTC", "2026-01-01T12:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 7 * 24},
		{Week, "UTC", "2026-01-04T23:59:59Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 7 * 24}, // Sunday: the same week
		{Week, "UTC", "2026-01-05T00:00:00Z", "2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z", 7 * 24},
		{Week, "UTC", "2026-04-01T00:00:00Z", "2026-03-30T00:00:00Z", "2026-04-06T00:00:00Z", 7 * 24},
		{Week, "Europe/Berlin", "2026-03-29T12:00:00Z", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 7*24 - 1},
		{Week, "Asia/Tokyo", "2026-01-04T15:00:00Z", "2026-01-05T00:00:00+09:00", "2026-01-12T00:00:00+09:00", 7 * 24}, // Monday in Tokyo, Sunday in UTC
		// Santiago's clocks skip midnight (00:00 -> 01:00 on 8 September
		// 2024): that day starts at 01:00. Havana's repeat it (01:00 ->
		// 00:00 on 3 November 2024): the day starts at the first 00:00.
		{Day, "America/Santiago", "2024-09-08T12:00:00Z", "2024-09-08T01:00:00-03:00", "2024-09-09T00:00:00-03:00", 23},
		{Day, "America/Santiago", "2024-09-07T12:00:00Z", "2024-09-07T00:00:00-04:00", "2024-09-08T01:00:00-03:00", 24},
		{Day, "America/Havana", "2024-11-03T04:30:00Z", "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00", 25},
		{Day, "America/Havana", "2024-11-03T05:30:00Z", "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00", 25}, // the second 00:30
		// Amman's too (01:00 -> 00:00 on 29 October 2021), east of UTC,
		// where time.Date answers the second midnight.
		{Day, "Asia/Amman", "2021-10-29T10:00:00Z", "2021-10-29T00:00:00+03:00", "2021-10-30T00:00:00+02:00", 25},
		{Day, "Asia/Amman", "2021-10-28T21:30:00Z", "2021-10-29T00:00:00+03:00", "2021-10-30T00:00:00+02:00", 25}, // the first 00:30
	} {
		loc := zone(t, c.zone)
		at := instant(t, c.at)
		p := c.cal.Period(at.UnixMicro(), loc)
		start, end := time.UnixMicro(p.Start).In(loc), time.UnixMicro(p.End).In(loc)
		if got, want := start.Format(time.RFC3339), c.start; got != want {
			t.Errorf("step %d (%s of %s in %s): start %s, want %s", i, c.cal, c.at, c.zone, got, want)
		}
		if got, want := end.Format(time.RFC3339), c.end; got != want {
			t.Errorf("step %d (%s of %s in %s): end %s, want %s", i, c.cal, c.at, c.zone, got, want)
		}
		if got := end.Sub(start).Hours(); got != c.hours {
			t.Errorf("step %d (%s of %s in %s): %v hours, want %v", i, c.cal, c.at, c.zone, got, c.hours)
		}
		if us := at.UnixMicro(); us < p.Start || us >= p.End {
			t.Errorf("step %d: %s is not in [%d, %d)", i, c.at, p.Start, p.End)
		}
	}
}

// TestPeriodsFollowEachOther: over three years of every zone kind, each
// period ends where the next begins, and holds every instant in between.
func TestPeriodsFollowEachOther(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "Asia/Tokyo", "America/Los_Angeles", "America/Santiago", "America/Havana", "Asia/Amman", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		for cal := Day; cal <= Year; cal++ {
			at := instant(t, "2024-01-01T00:00:00Z").UnixMicro()
			p := cal.Period(at, loc)
			for n := 0; p.Start < instant(t, "2027-01-01T00:00:00Z").UnixMicro(); n++ {
				next := cal.Period(p.End, loc)
				mid := cal.Period(p.Start+(p.End-p.Start)/2, loc)
				last := cal.Period(p.End-1, loc)
				if next.Start != p.End || mid != p || last != p || p.End <= p.Start {
					t.Fatalf("%s %s period %d: %v, its middle's %v, its last µs's %v, the next %v", name, cal, n, p, mid, last, next)
				}
				p = next
			}
		}
	}
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"", "UTC", "Europe/Berlin", "America/Los_Angeles"} {
		a, err := LoadZone(name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if b, _ := LoadZone(name); a != b {
			t.Errorf("%q: loaded twice, two zones: the cache does not hold it", name)
		}
	}
	for _, name := range []string{"Europe/Berln", "Local", "../../etc/passwd", "utc+1"} {
		if _, err := LoadZone(name); !errors.Is(err, ErrZone) {
			t.Errorf("%q: error %v, want ErrZone", name, err)
		}
	}
	if Zone("Nowhere/Else") != time.UTC {
		t.Error("Zone of an unknown name is not UTC")
	}
}

// calStep is one decision of a calendar window at an instant given in
// RFC 3339, charged when admitted.
type calStep struct {
	at           string
	hits         int64
	admitted     bool
	remaining    int64
	clear, reset time.Duration
}

func runCalendarSteps(t *testing.T, l CalendarFixed, steps []calStep) {
	t.Helper()
	var s CalendarState
	for i, st := range steps {
		now := instant(t, st.at)
		r := l.Decide(s, now, st.hits)
		if r.Admitted != st.admitted || r.Remaining != st.remaining || r.Clear != st.clear || r.Reset != st.reset || r.TTL != r.Clear {
			t.Errorf("step %d (%s, %d hits):\n got admitted %v remaining %d clear %s reset %s ttl %s\nwant admitted %v remaining %d clear %s reset %s",
				i, st.at, st.hits, r.Admitted, r.Remaining, r.Clear, r.Reset, r.TTL, st.admitted, st.remaining, st.clear, st.reset)
		}
		if r.Admitted {
			l.Charge(&s, now, st.hits)
		}
		if c := l.Count(s, now); r.Admitted && st.hits > 0 && c != l.Limit-r.Remaining && r.Remaining > 0 {
			t.Errorf("step %d: counts %d after the charge, reported %d remaining of %d", i, c, r.Remaining, l.Limit)
		}
	}
}

func TestCalendarMonthSteps(t *testing.T) {
	const h = time.Hour
	l := CalendarFixed{Limit: 10, Calendar: Month, Zone: zone(t, "Europe/Berlin")}
	runCalendarSteps(t, l, []calStep{
		{"2026-03-31T20:00:00Z", 6, true, 4, 2 * h, 0},        // Berlin's March ends at 22:00 UTC
		{"2026-03-31T21:00:00Z", 5, false, 0, h, h},           // 6 + 5 > 10: April, in an hour
		{"2026-03-31T21:00:00Z", 0, true, 4, h, 0},            // a peek
		{"2026-03-31T21:59:59.999999Z", 4, true, 0, 1000, 0},  // the last microsecond of March (1000ns)
		{"2026-03-31T22:00:00Z", 10, true, 0, 30 * 24 * h, 0}, // April: the whole limit again, until 1 May 00:00+02:00
		{"2026-04-15T22:00:00Z", 1, false, 0, 15 * 24 * h, 15 * 24 * h},
		{"2026-04-15T22:00:00Z", 11, false, 0, 15 * 24 * h, 15 * 24 * h}, // over the limit: the next period still
		{"2026-04-15T22:00:00Z", -3, true, 3, 15 * 24 * h, 0},            // a refund
		{"2026-03-31T23:00:00Z", 1, true, 2, 30*24*h - h, 0},             // the clock stepped back within April
		{"2026-03-31T21:00:00Z", 2, true, 0, 30*24*h + h, 0},             // and back into March: counted in April, until its end
		{"2026-05-01T00:00:00Z", 0, true, 10, 0, 0},                      // May (from 30 April 22:00 UTC): empty
	})
}

// TestCalendarDaySteps: a day of 23 hours in Berlin, then one of 25, and
// a budget that never admits (limit 0).
func TestCalendarDaySteps(t *testing.T) {
	const h = time.Hour
	l := CalendarFixed{Limit: 3, Calendar: Day, Zone: zone(t, "Europe/Berlin")}
	runCalendarSteps(t, l, []calStep{
		{"2026-03-28T23:00:00Z", 3, true, 0, 23 * h, 0}, // 00:00+01:00 on the 29th: 23 hours to go
		{"2026-03-29T21:00:00Z", 1, false, 0, h, h},
		{"2026-03-29T22:00:00Z", 1, true, 2, 24 * h, 0}, // the 30th
		{"2026-10-24T22:00:00Z", 2, true, 1, 25 * h, 0}, // 25 October: 25 hours
		{"2026-10-25T22:59:00Z", 2, false, 0, time.Minute, time.Minute},
		{"2026-10-25T23:00:00Z", 2, true, 1, 24 * h, 0},
	})
	zero := CalendarFixed{Limit: 0, Calendar: Week}
	runCalendarSteps(t, zero, []calStep{
		{"2026-01-01T00:00:00Z", 1, false, 0, 0, 4 * 24 * h}, // the week ends on Monday 5 January
		{"2026-01-01T00:00:00Z", 0, true, 0, 0, 0},
	})
}

// TestCalendarZoneChange: a reload that changes a window's zone keeps its
// count when the old period began within the new one, and a state of an
// earlier period counts nothing.
func TestCalendarZoneChange(t *testing.T) {
	utc := CalendarFixed{Limit: 10, Calendar: Month}
	berlin := CalendarFixed{Limit: 10, Calendar: Month, Zone: zone(t, "Europe/Berlin")}
	la := CalendarFixed{Limit: 10, Calendar: Month, Zone: zone(t, "America/Los_Angeles")}
	now := instant(t, "2026-03-15T12:00:00Z")
	var s CalendarState
	utc.Charge(&s, now, 4)
	if got := berlin.Count(s, now); got != 4 {
		t.Errorf("UTC's March (from 00:00 UTC) read in Berlin's (from 23:00 UTC the day before): counts %d, want 4", got)
	}
	if got := la.Count(s, now); got != 0 {
		t.Errorf("UTC's March read in Los Angeles's (from 08:00 UTC): counts %d, want 0", got)
	}
	berlin.Charge(&s, now, 1)
	if s.Start != instant(t, "2026-02-28T23:00:00Z").UnixMicro() || s.Count != 5 {
		t.Errorf("charged in Berlin: %+v, want 5 from Berlin's March", s)
	}
	old := CalendarState{Start: instant(t, "2026-02-01T00:00:00Z").UnixMicro(), Count: 9}
	if got := utc.Decide(old, now, 10); !got.Admitted || got.Remaining != 0 {
		t.Errorf("February's count in March: %+v, want all 10 admitted", got)
	}
}

// TestPeriodFoundBeforeIsTheSame: the periods Period remembers answer as
// the date arithmetic does, across zones sharing slots, calendars, period
// ends (a DST change included) and instants going back.
func TestPeriodFoundBeforeIsTheSame(t *testing.T) {
	zones := []*time.Location{time.UTC, Zone("Europe/Berlin"), Zone("America/New_York"), Zone("Asia/Kolkata"), Zone("Pacific/Chatham")}
	start := time.Date(2026, 3, 27, 0, 0, 0, 0, time.UTC).UnixMicro()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		at := start + rng.Int64N(10*24*3600*1e6) // ten days over Europe's spring change
		c := Calendar(rng.IntN(int(Year) + 2))   // NoCalendar and past Year count days
		loc := zones[rng.IntN(len(zones))]
		want, _ := c.period(at, loc)
		if got := c.Period(at, loc); got != want {
			t.Fatalf("step %d: %v.Period(%d, %v) = %+v, want %+v", i, c, at, loc, got, want)
		}
	}
}
