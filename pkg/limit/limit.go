package limit

import (
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// Limit is what a bucket admits, by one Algorithm. A leaky bucket (the
// zero Algorithm) holds at most Size requests and leaks DripSize of them
// every DripRate; a window admits at most Size hits in a Window, or, a
// fixed window with a Calendar, in each calendar period of its Zone.
//
// The zero Limit admits nothing. Decide treats a field out of range as its
// nearest valid value; Validate reports such fields.
//
// A Limit is comparable, and stores compare limits with == to know a
// bucket's limit unchanged (across requests and config reloads): every
// field is a value, the time zone too, kept as its name, not as a
// *time.Location (two loads of one zone are two pointers). The zone is
// looked up by name where a decision needs it, through window.LoadZone's
// cache: once per process.
type Limit struct {
	// Size is the most requests the limit admits at once: the bucket's
	// capacity, or a window's limit; 0 rejects every request.
	Size int64
	// DripRate is the time between two drips of a leaky bucket: at least
	// one microsecond and a whole number of microseconds.
	DripRate time.Duration
	// DripSize is how many requests leak out of a leaky bucket at each drip;
	// at least 1.
	DripSize int64

	// Algorithm is how the limit counts; the zero value is LeakyBucket.
	Algorithm Algorithm
	// Calendar, on a FixedWindow, makes its windows the calendar periods
	// of Zone (days, weeks from Monday, months, years, daylight saving
	// included) instead of multiples of Window since the Unix epoch;
	// Window is then 0. The zero value counts windows of Window.
	Calendar window.Calendar
	// Window is a window's length: a whole number of microseconds.
	Window time.Duration
	// Resolution is a sliding window's sub-window: it divides Window into
	// at most window.MaxSubWindows; 0 means Window/10.
	Resolution time.Duration
	// Zone is a calendar window's time zone, an IANA name such as
	// "Europe/Berlin"; "" is UTC. A name that does not load is read as
	// UTC (Validate reports it).
	Zone string
}

// Validate reports the first field of l that is out of range.
func (l Limit) Validate() error {
	if err := l.validateCalendar(); err != nil || l.IsCalendar() {
		return err
	}
	switch l.Algorithm {
	case SlidingWindow:
		return window.Sliding{Limit: l.Size, Window: l.Window, Resolution: l.Resolution}.Validate()
	case FixedWindow:
		return window.Fixed{Limit: l.Size, Window: l.Window}.Validate()
	case LeakyBucket:
		return l.Leaky().Validate()
	}
	return fmt.Errorf("unknown algorithm %d", l.Algorithm)
}

// String formats l as "size (drip_size per drip_rate)", e.g. "60 (1 per 1s)",
// for a leaky bucket, and as "100 per 1m0s sliding (5s)", "100 per 1m0s
// fixed" or "2000000 per calendar month (Europe/Berlin)" for a window.
func (l Limit) String() string {
	switch l.Algorithm {
	case SlidingWindow:
		w := l.Sliding()
		return fmt.Sprintf("%d per %s sliding (%s)", l.Size, w.Window, w.Resolution)
	case FixedWindow:
		if l.IsCalendar() {
			return fmt.Sprintf("%d per calendar %s (%s)", l.Size, l.Calendar, l.ZoneName())
		}
		return fmt.Sprintf("%d per %s fixed", l.Size, l.Window)
	}
	return l.Leaky().String()
}
