package limit

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/window"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// monthly is 2,000,000 tokens a calendar month in Berlin, as a budget
// says it.
var monthly = Limit{Algorithm: FixedWindow, Size: 2000000, Calendar: window.Month, Zone: "Europe/Berlin"}

// calendarStep is one Decide at an instant written in RFC 3339, carrying
// the state from the step before.
type calendarStep struct {
	at        string
	hits      int64
	admitted  bool
	remaining int64
	clear     time.Duration
	reset     time.Duration
	count     int64 // Count afterwards
}

func runCalendarSteps(t *testing.T, l Limit, steps []calendarStep) {
	t.Helper()
	var s State
	for i, st := range steps {
		now := at(t, st.at)
		r := Decide(s, l, now, st.hits)
		if r.Admitted != st.admitted || r.Remaining != st.remaining || r.Clear != st.clear || r.Reset != st.reset || r.TTL != r.Clear {
			t.Errorf("step %d (%s, %d hits):\n got admitted %v remaining %d clear %s reset %s ttl %s\nwant admitted %v remaining %d clear %s reset %s",
				i, st.at, st.hits, r.Admitted, r.Remaining, r.Clear, r.Reset, r.TTL, st.admitted, st.remaining, st.clear, st.reset)
		}
		s = r.State
		if c := Count(s, l, now); c != st.count {
			t.Errorf("step %d (%s): counts %d, want %d", i, st.at, c, st.count)
		}
	}
}

func TestDecideCalendarMonth(t *testing.T) {
	const h = time.Hour
	runCalendarSteps(t, monthly, []calendarStep{
		{"2026-02-27T23:00:00Z", 1500000, true, 500000, 24 * h, 0, 1500000}, // Berlin's February ends at 23:00 UTC on the 28th
		{"2026-02-28T12:00:00Z", 600000, false, 0, 11 * h, 11 * h, 1500000},
		{"2026-02-28T22:59:59Z", 500000, true, 0, time.Second, 0, 2000000},
		{"2026-02-28T23:00:00Z", 0, true, 2000000, 0, 0, 0},           // March in Berlin, while UTC is still in February
		{"2026-02-28T23:00:00Z", 7, true, 1999993, 31*24*h - h, 0, 7}, // March loses an hour to daylight saving
	})
}

// TestDecideCalendarWeekAndYear: a week from Monday across a year's end,
// and a year in a zone west of UTC.
func TestDecideCalendarWeekAndYear(t *testing.T) {
	const h = time.Hour
	week := Limit{Algorithm: FixedWindow, Size: 5, Calendar: window.Week}
	runCalendarSteps(t, week, []calendarStep{
		{"2025-12-31T00:00:00Z", 5, true, 0, 5 * 24 * h, 0, 5}, // Wednesday; the week ends Monday 5 January
		{"2026-01-04T23:00:00Z", 1, false, 0, h, h, 5},
		{"2026-01-05T00:00:00Z", 1, true, 4, 7 * 24 * h, 0, 1},
	})
	year := Limit{Algorithm: FixedWindow, Size: 3, Calendar: window.Year, Zone: "America/Los_Angeles"}
	runCalendarSteps(t, year, []calendarStep{
		{"2027-01-01T07:00:00Z", 3, true, 0, time.Hour, 0, 3}, // 23:00 on New Year's Eve in Los Angeles
		{"2027-01-01T08:00:00Z", 1, true, 2, 365 * 24 * h, 0, 1},
	})
}

func TestCalendarChargesAlways(t *testing.T) {
	day := Limit{Algorithm: FixedWindow, Size: 10, Calendar: window.Day, Zone: "Asia/Tokyo"}
	now := at(t, "2026-03-04T14:00:00Z") // 23:00 in Tokyo
	states := []State{{}}
	results := make([]Result, 1)
	charge := []Bucket{{Key: "tok", Limit: day, Hits: 25, Always: true}}
	if DecideAll(states, charge, now, results) {
		t.Fatal("25 admitted in a budget of 10")
	}
	if r := results[0]; r.State.Counter != 25 || r.Reset != time.Hour || r.Remaining != 0 {
		t.Errorf("charged past the budget: %+v, want 25 counted and a reset at Tokyo's midnight, in an hour", r)
	}
	states[0] = results[0].State
	check := []Bucket{{Key: "tok", Limit: day, Always: true}}
	if DecideAll(states, check, now.Add(59*time.Minute), results) {
		t.Error("a check past the budget passed")
	}
	if !DecideAll(states, check, now.Add(time.Hour), results) || results[0].Remaining != 10 {
		t.Errorf("a check in the next day: %+v, want the whole budget", results[0])
	}
}

func TestUnchargeCalendar(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Size: 10, Calendar: window.Day, Zone: "Europe/Berlin"}
	chargedAt := at(t, "2026-03-04T22:30:00Z") // 23:30 on the 4th in Berlin
	s := Decide(State{}, l, chargedAt, 6).State
	for i, c := range []struct {
		hits int64
		at   string
		want int64
	}{
		{2, "2026-03-04T22:50:00Z", 4},  // charged in the same day
		{2, "2026-03-04T23:10:00Z", 6},  // charged on the 5th: not this count's
		{2, "2026-03-03T23:00:00Z", 4},  // the first instant of the 4th: this day
		{20, "2026-03-04T12:00:00Z", 0}, // never below 0
		{1, "2026-03-04T22:59:59Z", 5},  // the last second of the 4th
		{1, "2026-03-03T22:59:59Z", 6},  // the 3rd
	} {
		got := Uncharge(s, l, at(t, c.at), c.hits)
		if got.Counter != c.want {
			t.Errorf("step %d: uncharge %d charged at %s: counter %d, want %d", i, c.hits, c.at, got.Counter, c.want)
		}
	}
}

func TestLeaseCalendar(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Size: 10, Calendar: window.Day, Zone: "Europe/Berlin"}
	// A day in Berlin starts at 23:00 UTC the day before.
	var s State
	for i, c := range []struct {
		now, retAt  string
		ret, ask    int64
		granted, to int64
	}{
		{"2026-03-04T22:00:00Z", "", 0, 6, 6, 6},
		{"2026-03-04T22:30:00Z", "", 0, 6, 4, 10},
		{"2026-03-04T22:40:00Z", "2026-03-04T22:00:00Z", 3, 1, 1, 8},
		// Units of the day before are not taken from this one.
		{"2026-03-04T23:10:00Z", "2026-03-04T22:30:00Z", 5, 3, 3, 3},
		{"2026-03-04T23:20:00Z", "2026-03-04T23:10:00Z", 3, 0, 0, 0},
	} {
		retAt := time.Time{}
		if c.retAt != "" {
			retAt = at(t, c.retAt)
		}
		g, r := Lease(s, l, at(t, c.now), c.ret, retAt, c.ask)
		if g != c.granted || r.State.Counter != c.to {
			t.Fatalf("step %d (%s, ret %d, ask %d): granted %d, counter %d; want %d, %d", i, c.now, c.ret, c.ask, g, r.State.Counter, c.granted, c.to)
		}
		s = r.State
	}
}

func TestCalendarRateValidateString(t *testing.T) {
	if got, want := monthly.Rate(), (Rate{RequestsPerUnit: 2000000, Unit: Month}); got != want {
		t.Errorf("Rate() = %v, want %v", got, want)
	}
	if got, want := monthly.String(), "2000000 per calendar month (Europe/Berlin)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if err := monthly.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	l, ok := Rate{RequestsPerUnit: 500, Unit: Day}.CalendarLimit("")
	if !ok || l != (Limit{Algorithm: FixedWindow, Size: 500, Calendar: window.Day}) || l.ZoneName() != "UTC" {
		t.Errorf("500/day as a calendar window: %+v, %v", l, ok)
	}
	for _, r := range []Rate{{1, Hour, 0}, {1, Second, 0}, {1, Month, 2}} {
		if _, ok := r.CalendarLimit("UTC"); ok {
			t.Errorf("%v made a calendar window", r)
		}
	}
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{Limit{Algorithm: FixedWindow, Size: 1, Calendar: window.Day, Zone: "Mars/Olympus"}, "unknown time zone"},
		{Limit{Algorithm: FixedWindow, Size: 1, Calendar: window.Day, Window: time.Hour}, "no window length"},
		{Limit{Algorithm: SlidingWindow, Size: 1, Calendar: window.Day, Window: time.Hour}, "fixed windows only"},
		{Limit{Algorithm: FixedWindow, Size: 1, Window: time.Hour, Zone: "UTC"}, "calendar windows only"},
		{Limit{Algorithm: FixedWindow, Size: 1, Calendar: 9}, "calendar must be"},
		{Limit{Algorithm: FixedWindow, Size: -1, Calendar: window.Year}, "limit must be"},
	} {
		if err := c.l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate = %v, want %q", c.l, err, c.want)
		}
	}
}

// TestCalendarLimitComparable: two limits of one zone, made apart (as two
// loads of one config make them), are equal, and decide alike.
func TestCalendarLimitComparable(t *testing.T) {
	a, _ := Rate{RequestsPerUnit: 10, Unit: Month}.CalendarLimit(strings.Clone("Europe/Berlin"))
	b, _ := Rate{RequestsPerUnit: 10, Unit: Month}.CalendarLimit(strings.Clone("Europe/Berlin"))
	if a != b || a != (Limit{Algorithm: FixedWindow, Size: 10, Calendar: window.Month, Zone: "Europe/Berlin"}) {
		t.Fatalf("%+v and %+v differ", a, b)
	}
	now := at(t, "2026-03-31T22:30:00Z")
	if !Decide(State{}, a, now, 1).Equal(Decide(State{}, b, now, 1)) {
		t.Fatal("equal limits decide apart")
	}
}

func TestFixedPeriod(t *testing.T) {
	fixed := Limit{Algorithm: FixedWindow, Size: 1, Window: time.Minute}
	now := at(t, "2026-03-04T05:06:07Z").UnixMicro()
	if p := fixed.FixedPeriod(now); p.Start != at(t, "2026-03-04T05:06:00Z").UnixMicro() || p.End != at(t, "2026-03-04T05:07:00Z").UnixMicro() {
		t.Errorf("a minute's window: %+v", p)
	}
	if p := monthly.FixedPeriod(now); p.Start != at(t, "2026-02-28T23:00:00Z").UnixMicro() || p.End != at(t, "2026-03-31T22:00:00Z").UnixMicro() {
		t.Errorf("Berlin's March: %+v", p)
	}
}

func TestDecideCalendarDoesNotAllocate(t *testing.T) {
	now := at(t, "2026-03-31T21:59:59Z")
	allocs := testing.AllocsPerRun(100, func() {
		r := Decide(State{Counter: 3, Timestamp: monthly.FixedPeriod(now.UnixMicro()).Start}, monthly, now, 1)
		_ = Count(r.State, monthly, now)
	})
	if allocs != 0 {
		t.Errorf("Decide of a calendar window allocates %v times per call, want 0", allocs)
	}
}
