// Package window is the sliding and fixed windows: their parameters,
// states and pure decisions. Like package leaky, it knows no other
// algorithm, no request of several buckets and no store.
//
// The sliding window is a count over the last Window, in sub-windows of
// Resolution; the fixed window is envoyproxy/ratelimit's counting; a
// calendar window (CalendarFixed) is a fixed window whose windows are the
// days, weeks, months or years of a time zone (Calendar.Period). Each
// decision is a pure function of (state, limit, now, hits), as leaky's:
// Decide says whether hits fit and what to report, changing nothing, and
// Charge adds them once every bucket of the request has admitted, so that
// stores apply the all-or-nothing rule the same way for every algorithm.
//
// Time is kept in microseconds since the Unix epoch.
package window

import "time"

// Result is the outcome of one decision for one window.
type Result struct {
	// Admitted reports whether the hits fit.
	Admitted bool
	// Remaining is Limit less the count after the decision, with the hits;
	// 0 when they were not admitted, as for a leaky bucket.
	Remaining int64
	// Clear is the time until the window counts nothing: until the newest
	// sub-window holding hits has left it.
	Clear time.Duration
	// Reset is, when the hits were not admitted, the time until enough of
	// the oldest hits have left for them to fit; hits over the limit never
	// fit, and Reset is then a whole window.
	Reset time.Duration
	// TTL is how long a store must keep the state: until it counts nothing
	// (Clear after a charge); 0 means it need not be kept.
	TTL time.Duration
}

// admit decides whether hits fit in a window that counts count: Admitted
// and Remaining, and the count once charged (the count as it is when the
// hits do not fit).
func admit(limit, count, hits int64) (r Result, after int64) {
	r.Admitted = hits <= limit-count
	after = count
	if r.Admitted {
		after = max(count+hits, 0)
		r.Remaining = max(limit-after, 0)
	}
	return r, after
}
