// Package breaker stops sending calls to a server that keeps timing out:
// a hung Redis node accepts connections and never answers, so every call
// sent to it waits out its deadline before the failure mode answers, and
// holds a goroutine and a connection meanwhile. After Trip timeouts in a
// row, a server's breaker opens: its calls fail at once for Cool; then one
// call goes through as a probe, and its answer closes the breaker (any
// answer: a server that answers is alive) or its timeout opens it again.
// A slow server that answers within the deadlines never trips it, and
// errors that come at once (a refused connection) do not count: they cost
// the caller nothing.
package breaker

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOpen is the error of a call not sent because its server's breaker is
// open.
var ErrOpen = errors.New("not sent: the server timed out on the calls before (circuit breaker open)")

// Defaults: five timeouts in a row trip a breaker, for half a second.
const (
	DefaultTrip = 5
	DefaultCool = 500 * time.Millisecond
)

// State is one server's breaker.
type State struct {
	// Timeouts counts the timeouts in a row, since the last answer.
	Timeouts int
	// OpenUntil is when an open breaker lets a probe through; zero when
	// closed.
	OpenUntil time.Time
	// Probing is set while the probe is out.
	Probing bool
}

// Outcome is how a call ended, as a breaker counts it.
type Outcome int

const (
	// Answered: the server answered (with an error or not).
	Answered Outcome = iota
	// TimedOut: no answer before the call's deadline.
	TimedOut
	// Abandoned: neither (a refused connection, a call cancelled): not
	// counted.
	Abandoned
)

// Allow is the decision before a call at now: whether to send it, whether
// it is the probe, and the state after.
func Allow(s State, now time.Time) (send, probe bool, after State) {
	switch {
	case s.OpenUntil.IsZero():
		return true, false, s
	case s.Probing || now.Before(s.OpenUntil):
		return false, false, s
	}
	s.Probing = true
	return true, true, s
}

// Done is the state after a call sent at Allow's word ended with o; probe
// is what Allow said of it.
func Done(s State, o Outcome, probe bool, trip int, cool time.Duration, now time.Time) State {
	if probe {
		s.Probing = false
	}
	switch o {
	case Answered:
		return State{} // a probe still out finds it closed
	case TimedOut:
		s.Timeouts++
		if probe || (s.OpenUntil.IsZero() && s.Timeouts >= trip) {
			s.OpenUntil = now.Add(cool)
		}
	case Abandoned:
		if probe && !s.OpenUntil.IsZero() {
			s.OpenUntil = now // the probe told nothing: the next call probes
		}
	}
	return s
}

// Set holds the breakers of several servers, by name (an address).
type Set struct {
	trip int
	cool time.Duration
	now  func() time.Time

	mu sync.Mutex
	m  map[string]*State
	// kept is len(m), read without the lock: while no server has timed
	// out, a call takes no lock.
	kept atomic.Int32
}

// New returns a Set whose breakers trip after trip timeouts in a row (at
// least 1) and stay open for cool; now is the clock (time.Now if nil).
func New(trip int, cool time.Duration, now func() time.Time) *Set {
	if now == nil {
		now = time.Now
	}
	return &Set{trip: max(trip, 1), cool: cool, now: now, m: map[string]*State{}}
}

// maxServers bounds the breakers a Set keeps: closed ones without timeouts
// are dropped when it is reached (a Cluster's nodes are far fewer).
const maxServers = 1024

// Ticket is a call Allow let through; its Done must be called with the
// outcome.
type Ticket struct {
	set    *Set
	server string
	probe  bool
}

// Allow reports whether a call to server may be sent.
func (b *Set) Allow(server string) (Ticket, bool) {
	if b.kept.Load() == 0 {
		return Ticket{set: b, server: server}, true
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[server]
	if s == nil {
		return Ticket{set: b, server: server}, true // nearly every call
	}
	send, probe, after := Allow(*s, now)
	*s = after
	return Ticket{set: b, server: server, probe: probe}, send
}

// Done counts the call's outcome.
func (t Ticket) Done(o Outcome) {
	b := t.set
	if b == nil || (o != TimedOut && !t.probe && b.kept.Load() == 0) {
		return
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[t.server]
	if s == nil {
		if o != TimedOut {
			return
		}
		if len(b.m) >= maxServers {
			b.prune()
		}
		s = &State{}
		b.m[t.server] = s
	}
	*s = Done(*s, o, t.probe, b.trip, b.cool, now)
	if *s == (State{}) {
		delete(b.m, t.server)
	}
	b.kept.Store(int32(len(b.m)))
}

// prune drops the breakers that are closed (the caller stores kept).
func (b *Set) prune() {
	for name, s := range b.m {
		if s.OpenUntil.IsZero() {
			delete(b.m, name)
		}
	}
}

// Open returns the servers whose breaker is open now, for what the
// service reports.
func (b *Set) Open() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var open []string
	for name, s := range b.m {
		if !s.OpenUntil.IsZero() {
			open = append(open, name)
		}
	}
	return open
}
