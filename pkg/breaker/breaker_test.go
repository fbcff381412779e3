package breaker

import (
	"fmt"
	"testing"
	"time"
)

// TestSteps runs one server's breaker through a table of calls at fixed
// instants (trip 3, cool 500 ms): each step is a call made at `at` ms,
// whether it may be sent, and, if sent, how it ends at `end` ms.
func TestSteps(t *testing.T) {
	type step struct {
		at, end  int // ms
		send     bool
		probe    bool
		outcome  Outcome
		open     bool // after the call ended
		timeouts int
	}
	tables := map[string][]step{
		"trips after three timeouts in a row, probes after cool": {
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 1},
			{at: 100, end: 200, send: true, outcome: TimedOut, timeouts: 2},
			{at: 200, end: 300, send: true, outcome: TimedOut, open: true, timeouts: 3},
			{at: 300, send: false, open: true, timeouts: 3},
			{at: 799, send: false, open: true, timeouts: 3},
			{at: 800, end: 810, send: true, probe: true, outcome: Answered},
			{at: 820, end: 821, send: true, outcome: Answered},
		},
		"an answer between timeouts keeps it closed": {
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 1},
			{at: 100, end: 200, send: true, outcome: TimedOut, timeouts: 2},
			{at: 200, end: 230, send: true, outcome: Answered},
			{at: 230, end: 330, send: true, outcome: TimedOut, timeouts: 1},
			{at: 330, end: 430, send: true, outcome: TimedOut, timeouts: 2},
		},
		"refused connections do not count": {
			{at: 0, end: 1, send: true, outcome: Abandoned},
			{at: 1, end: 2, send: true, outcome: Abandoned},
			{at: 2, end: 3, send: true, outcome: Abandoned},
			{at: 3, end: 4, send: true, outcome: Abandoned},
		},
		"a probe that times out opens it again": {
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 1},
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 2},
			{at: 0, end: 100, send: true, outcome: TimedOut, open: true, timeouts: 3},
			{at: 600, end: 700, send: true, probe: true, outcome: TimedOut, open: true, timeouts: 4},
			{at: 1100, send: false, open: true, timeouts: 4},
			{at: 1200, end: 1201, send: true, probe: true, outcome: Answered},
		},
		"one probe at a time": {
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 1},
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 2},
			{at: 0, end: 100, send: true, outcome: TimedOut, open: true, timeouts: 3},
			// The probe goes at 600 and is out (Done comes with the next
			// step's call sent first: see probeOut below).
			{at: 600, send: true, probe: true, outcome: -1, open: true, timeouts: 3},
			{at: 601, send: false, open: true, timeouts: 3},
		},
		"an abandoned probe lets the next call probe": {
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 1},
			{at: 0, end: 100, send: true, outcome: TimedOut, timeouts: 2},
			{at: 0, end: 100, send: true, outcome: TimedOut, open: true, timeouts: 3},
			{at: 600, end: 601, send: true, probe: true, outcome: Abandoned, open: true, timeouts: 3},
			{at: 602, end: 603, send: true, probe: true, outcome: Answered},
		},
	}
	ms := func(n int) time.Time { return time.UnixMilli(int64(n)) }
	for name, steps := range tables {
		t.Run(name, func(t *testing.T) {
			var s State
			for i, st := range steps {
				send, probe, after := Allow(s, ms(st.at))
				s = after
				if send != st.send || probe != st.probe {
					t.Fatalf("step %d at %d ms: send %v probe %v, want %v %v", i, st.at, send, probe, st.send, st.probe)
				}
				if send && st.outcome >= 0 {
					s = Done(s, st.outcome, probe, 3, 500*time.Millisecond, ms(st.end))
				}
				if open := !s.OpenUntil.IsZero(); open != st.open || s.Timeouts != st.timeouts {
					t.Fatalf("step %d: open %v after %d timeouts, want %v after %d (%+v)", i, open, s.Timeouts, st.open, st.timeouts, s)
				}
			}
		})
	}
}

// TestSetKeepsServersApart trips one server's breaker: another's calls
// still go, and the tripped one's go again once a probe is answered.
func TestSetKeepsServersApart(t *testing.T) {
	now := time.UnixMilli(0)
	b := New(2, time.Second, func() time.Time { return now })
	for range 2 {
		tk, ok := b.Allow("hung:6379")
		if !ok {
			t.Fatal("a closed breaker refused a call")
		}
		tk.Done(TimedOut)
	}
	if _, ok := b.Allow("hung:6379"); ok {
		t.Fatal("the breaker did not open after 2 timeouts")
	}
	if fmt.Sprint(b.Open()) != "[hung:6379]" {
		t.Fatalf("Open() = %v", b.Open())
	}
	for range 100 {
		tk, ok := b.Allow("alive:6379")
		if !ok {
			t.Fatal("another server's call was refused")
		}
		tk.Done(Answered)
	}
	now = now.Add(time.Second)
	tk, ok := b.Allow("hung:6379")
	if !ok {
		t.Fatal("no probe after the cool-down")
	}
	if _, ok := b.Allow("hung:6379"); ok {
		t.Fatal("a second call went while the probe was out")
	}
	tk.Done(Answered)
	if _, ok := b.Allow("hung:6379"); !ok || len(b.Open()) != 0 {
		t.Fatalf("still open after the probe was answered: %v", b.Open())
	}
	if b.kept.Load() != 0 {
		t.Fatalf("%d breakers kept with every server answering", b.kept.Load())
	}
}

// BenchmarkAllowClosed is the cost a call pays while no server times out.
func BenchmarkAllowClosed(b *testing.B) {
	s := New(DefaultTrip, DefaultCool, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, _ := s.Allow("10.0.0.1:6379")
			tk.Done(Answered)
		}
	})
}
