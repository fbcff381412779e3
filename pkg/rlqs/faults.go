package rlqs

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// faultLog logs when the service's answers change standing (fresh,
// static, failed): once a change, and a change into a standing at most
// once per faultLogEvery, not once a report. An outage of the store would
// otherwise log a line per report of every stream, thousands a second for
// a fleet.
type faultLog struct {
	mu     sync.Mutex
	now    standing
	logged [3]time.Time // when a change into each standing was last logged
}

// faultLogEvery is the least time between two logs of a change into one
// standing.
const faultLogEvery = 10 * time.Second

// note records a report's standing at now, and whether the change into it
// is to be logged.
func (f *faultLog) note(s standing, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now == s {
		return false
	}
	f.now = s
	if now.Sub(f.logged[s]) < faultLogEvery {
		return false
	}
	f.logged[s] = now
	return true
}

// rareLog logs a warning that may come once per stream (a fleet leaving
// while the store is slow) at most once per faultLogEvery, with how many
// were left out since the last.
type rareLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (r *rareLog) warn(log *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last) < faultLogEvery {
		r.skipped++
		r.mu.Unlock()
		return
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	r.mu.Unlock()
	log.Warn(msg, append(args, "more_since_the_last_such_line", skipped)...)
}

// record logs a report's standing, if it changed.
func (f *faultLog) record(log *slog.Logger, s standing, opts *Options, chargeErr, publishErr error) {
	if !f.note(s, time.Now()) {
		return
	}
	err := errors.Join(chargeErr, publishErr)
	switch s {
	case standsFresh:
		log.Info("rlqs: the store and the other replicas answer again; shares are divided afresh")
	case standsStatic:
		log.Warn("rlqs: the store or the other replicas' demands cannot be reached; every stream is answered from the last division known (fail-static), usage is charged once the store answers",
			"fail_static", opts.FailStatic, "err", err)
	default:
		log.Warn("rlqs: the store or the other replicas' demands cannot be reached; the failure mode answers", "failure_mode", opts.FailureMode, "err", err)
	}
}
