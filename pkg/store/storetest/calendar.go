package storetest

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// Calendar returns a calendar window: size hits in each period of c in
// zone (an IANA name; "" is UTC).
func Calendar(size int64, c window.Calendar, zone string) limit.Limit {
	return limit.Limit{Algorithm: limit.FixedWindow, Size: size, Calendar: c, Zone: zone}
}

// RunCalendar runs the calendar windows' step tables alone: for a store
// whose other behaviour is tested elsewhere.
func RunCalendar(t *testing.T, newStore NewStore) {
	runTables(t, newStore, calendarTables())
}

// calendarTables are the calendar windows' step tables through a store:
// periods that end at a zone's midnight, months of 30 and 31 days, days of
// 23 and 25 hours, a week from Monday across a month's end, a zone east
// and one west of UTC, a clock stepping back across a period's end, a
// budget charged always, and requests that mix a calendar window with the
// other algorithms. The instants are the periods' own, written as
// durations from T0 (Wednesday 4 March 2026, 05:06:07 UTC).
func calendarTables() []table {
	const (
		s = time.Second
		h = time.Hour
		d = 24 * h
	)
	in := window.Zone
	from := func(t time.Time) time.Duration { return t.Sub(T0) }
	berlinApril := from(time.Date(2026, 4, 1, 0, 0, 0, 0, in("Europe/Berlin")))   // 31 March, 22:00 UTC
	berlinMay := from(time.Date(2026, 5, 1, 0, 0, 0, 0, in("Europe/Berlin")))     // April has 30 days
	short := from(time.Date(2026, 3, 29, 0, 0, 0, 0, in("Europe/Berlin")))        // a day of 23 hours
	long := from(time.Date(2026, 10, 25, 0, 0, 0, 0, in("Europe/Berlin")))        // a day of 25 hours
	tokyoMonday := from(time.Date(2026, 3, 9, 0, 0, 0, 0, in("Asia/Tokyo")))      // Sunday 15:00 UTC
	tokyoTomorrow := from(time.Date(2026, 3, 5, 0, 0, 0, 0, in("Asia/Tokyo")))    // 15:00 UTC today
	laApril := from(time.Date(2026, 4, 1, 0, 0, 0, 0, in("America/Los_Angeles"))) // 07:00 UTC on 1 April
	utcMidnight := from(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))

	month := Calendar(10, window.Month, "Europe/Berlin")
	day := Calendar(3, window.Day, "Europe/Berlin")
	week := Calendar(5, window.Week, "Asia/Tokyo")
	la := Calendar(4, window.Month, "America/Los_Angeles")
	utcDay := Calendar(2, window.Day, "")
	tokens := Calendar(1000, window.Day, "Asia/Tokyo")
	lb := limit.Limit{Size: 5, DripRate: s, DripSize: 1}
	sw := Sliding(2, 10*s, s)
	mix := func(hits int64) []limit.Bucket {
		return []limit.Bucket{bucket("cmix|lb", lb, hits), bucket("cmix|sw", sw, hits), bucket("cmix|cal", Calendar(3, window.Day, "Asia/Tokyo"), hits)}
	}
	return []table{
		{"CalendarMonth", []call{
			one(0, bucket("cm", month, 6), outcome{true, 4, berlinApril, 0}),
			one(berlinApril-s, bucket("cm", month, 5), outcome{false, 0, s, s}),
			one(berlinApril-s, bucket("cm", month, 4), outcome{true, 0, s, 0}),
			one(berlinApril, bucket("cm", month, 10), outcome{true, 0, 30 * d, 0}), // April: the whole limit, for 30 days
			one(berlinMay-s, bucket("cm", month, 1), outcome{false, 0, s, s}),
			one(berlinMay, bucket("cm", month, 0), outcome{true, 10, 0, 0}),
			one(berlinMay, bucket("cm", month, 11), outcome{false, 0, 0, 31 * d}), // over the limit: never fits, the period's end
		}},
		{"CalendarDaylightSaving", []call{
			one(short, bucket("cd", day, 3), outcome{true, 0, 23 * h, 0}),
			one(short+22*h, bucket("cd", day, 1), outcome{false, 0, h, h}),
			one(short+23*h, bucket("cd", day, 1), outcome{true, 2, 24 * h, 0}),
			one(long, bucket("cd", day, 2), outcome{true, 1, 25 * h, 0}),
			one(long+25*h-s, bucket("cd", day, 2), outcome{false, 0, s, s}),
			one(long+25*h, bucket("cd", day, 2), outcome{true, 1, 24 * h, 0}),
		}},
		{"CalendarWeekEast", []call{
			one(0, bucket("cw", week, 5), outcome{true, 0, tokyoMonday, 0}),
			one(tokyoMonday-s, bucket("cw", week, 1), outcome{false, 0, s, s}),
			one(tokyoMonday, bucket("cw", week, 1), outcome{true, 4, 7 * d, 0}),
		}},
		{"CalendarMonthWest", []call{
			// 1 April in UTC, still March in Los Angeles.
			one(laApril-h, bucket("cl", la, 4), outcome{true, 0, h, 0}),
			one(laApril-s, bucket("cl", la, 1), outcome{false, 0, s, s}),
			one(laApril, bucket("cl", la, 4), outcome{true, 0, 30 * d, 0}),
		}},
		{"CalendarClockStepsBack", []call{
			one(utcMidnight-s, bucket("cb", utcDay, 2), outcome{true, 0, s, 0}),
			one(utcMidnight, bucket("cb", utcDay, 1), outcome{true, 1, d, 0}),
			// A second earlier: the 5th's count still, until its end.
			one(utcMidnight-s, bucket("cb", utcDay, 1), outcome{true, 0, d + s, 0}),
			one(utcMidnight-s, bucket("cb", utcDay, 1), outcome{false, 0, d + s, d + s}),
			one(utcMidnight+d, bucket("cb", utcDay, 2), outcome{true, 0, d, 0}),
		}},
		{"CalendarBudgetChargedAlways", []call{
			one(0, always(bucket("ct", tokens, 0)), outcome{true, 1000, 0, 0}),
			one(0, always(bucket("ct", tokens, 600)), outcome{true, 400, tokyoTomorrow, 0}),
			one(h, always(bucket("ct", tokens, 600)), outcome{false, 0, tokyoTomorrow - h, tokyoTomorrow - h}),
			one(tokyoTomorrow-s, always(bucket("ct", tokens, 0)), outcome{false, 0, s, s}),
			one(tokyoTomorrow, always(bucket("ct", tokens, 0)), outcome{true, 1000, 0, 0}),
		}},
		{"CalendarMixedAllOrNothing", []call{
			{0, mix(1), []outcome{{true, 4, s, 0}, {true, 1, 10 * s, 0}, {true, 2, tokyoTomorrow, 0}}},
			{0, mix(1), []outcome{{true, 3, 2 * s, 0}, {true, 0, 10 * s, 0}, {true, 1, tokyoTomorrow, 0}}},
			// The sliding window rejects: the calendar window is not charged.
			{0, mix(1), []outcome{{true, 3, 2 * s, 0}, {false, 0, 10 * s, 10 * s}, {true, 1, tokyoTomorrow, 0}}},
			{10 * s, mix(1), []outcome{{true, 4, s, 0}, {true, 1, 10 * s, 0}, {true, 0, tokyoTomorrow - 10*s, 0}}},
			// Now the calendar window rejects: the others are left as they are.
			{20 * s, mix(1), []outcome{{true, 5, 0, 0}, {true, 2, 0, 0}, {false, 0, tokyoTomorrow - 20*s, tokyoTomorrow - 20*s}}},
			{tokyoTomorrow, mix(1), []outcome{{true, 4, s, 0}, {true, 1, 10 * s, 0}, {true, 2, d, 0}}},
		}},
	}
}
