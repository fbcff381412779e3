package redis

import "github.com/envoy-rls/envoy-rls/pkg/limit"

// The scripts' algorithms: limit's, and a calendar window of its own (a
// fixed window whose windows are periods the service sends).
const scriptCalendar = 3

// scriptAlgorithm returns the algorithm a script is told a limit has: 0
// leaky bucket, 1 sliding window, 2 fixed window, 3 calendar window.
func scriptAlgorithm(l limit.Limit) int64 {
	if l.IsCalendar() {
		return scriptCalendar
	}
	return int64(l.Algorithm)
}

// calendarBounds returns the bounds of a calendar window's periods around
// the service's clock ref (Unix microseconds): the starts of the period
// before ref's, of ref's and of the one after, and the end of that one.
//
// A calendar period's bounds take the zone database, which Lua has not:
// the service works them out and the script picks, among the three
// periods, the one holding the time it decides at, by Redis's clock (or
// the state's start, if later: a clock stepped back), as
// window.CalendarFixed.Decide picks by its own clock. The two clocks may
// then differ by up to a period (23 hours at the least, a day the clocks
// spring forward) and a boundary that falls between them is still
// crossed once, by Redis's clock, for every replica: no period is counted
// twice or lost. A Redis clock further off than that is refused, before
// the script writes anything (decide.lua, lease.lua).
func calendarBounds(l limit.Limit, ref int64) [4]int64 {
	cur := l.FixedPeriod(ref)
	prev, next := l.FixedPeriod(cur.Start-1), l.FixedPeriod(cur.End)
	return [4]int64{prev.Start, cur.Start, cur.End, next.End}
}

// around reports whether l was sent with periods around ref's: any limit
// but a calendar window, or one whose middle period holds ref.
func (l *scriptLimit) around(ref int64) bool {
	return !l.of.IsCalendar() || (l.p[2] <= ref && ref < l.p[3])
}
