package rlqsclient

import (
	"sync"
	"time"
)

// Clock tells the time. Envoy's client reads a monotonic clock: the values
// of time.Now carry a monotonic reading, and a ManualClock never goes back.
type Clock interface {
	Now() time.Time
}

// realClock is the wall clock, used when Options.Clock is nil.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to, for unit tests. An
// Instance given any Clock sets no report timer: the test ticks with
// Instance.Report, and expiries and refills follow the clock.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d is ignored, as a
// monotonic clock never goes back.
func (c *ManualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
