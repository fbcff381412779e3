package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// randomSkew is how far the service's clock, around which calendar
// windows' periods are sent, is from the time a script decides at: most
// often none, else seconds, minutes or most of a day either way.
func randomSkew(rng *rand.Rand) time.Duration {
	return []time.Duration{0, 0, 0, time.Second, -time.Second, 3 * time.Minute, -3 * time.Minute, 20 * time.Hour, -20 * time.Hour}[rng.IntN(9)]
}

var calendarZones = []string{"", "Europe/Berlin", "Asia/Tokyo", "America/Los_Angeles", "Australia/Lord_Howe"}

// randomCalendar is a calendar window of a random period and zone.
func randomCalendar(rng *rand.Rand, size int64) limit.Limit {
	return limit.Limit{Algorithm: limit.FixedWindow, Size: size, Calendar: window.Day + window.Calendar(rng.IntN(4)),
		Zone: calendarZones[rng.IntN(len(calendarZones))]}
}

// randomFixedState is a fixed window's state at now: of its window, of
// one or two before, or of the next (a clock stepped back; not when the
// service's clock is behind, skew < 0: the next period may then be beyond
// those the script is sent); for a calendar window, sometimes starting
// within its period (a zone changed by a reload).
func randomFixedState(rng *rand.Rand, l limit.Limit, now time.Time, skew time.Duration) limit.State {
	count := rng.Int64N(2*l.Size + 2)
	k := 1 - rng.Int64N(4)
	if skew < 0 && k == 1 {
		k = 0
	}
	p := l.FixedPeriod(now.UnixMicro())
	switch {
	case k == 1:
		p = l.FixedPeriod(p.End)
	case k < 0:
		p = l.FixedPeriod(p.Start - 1)
		if k == -2 {
			p = l.FixedPeriod(p.Start - 1)
		}
	case l.IsCalendar() && rng.IntN(4) == 0:
		p.Start += rng.Int64N(now.UnixMicro() - p.Start + 1)
	}
	return limit.State{Counter: count, Timestamp: p.Start}
}

// clockSteps is a calendar window of 5 a day in Berlin, decided at
// instants around the end of 29 March 2026 (a day of 23 hours), which
// falls at 22:00 UTC; in order, carrying the bucket.
var clockSteps = []struct {
	at        time.Duration // from the day's end
	hits      int64
	admitted  bool
	remaining int64
	reset     time.Duration
}{
	{-2 * time.Second, 3, true, 2, 0},
	{-time.Second, 2, true, 0, 0},
	{-time.Microsecond, 1, false, 0, time.Microsecond}, // still the 29th: full
	{0, 5, true, 0, 0},                                 // the 30th, whole: the 29th's hits are not counted twice
	{time.Second, 1, false, 0, 24*time.Hour - time.Second},
	{-time.Second, 1, false, 0, 24*time.Hour + time.Second}, // the clock stepped back: still the 30th's count, none lost
	{24 * time.Hour, 4, true, 1, 0},                         // the 31st
}

// TestCalendarAcrossClocks: a period's end that falls between the
// service's clock (around which the periods are sent) and the time the
// script decides at is crossed once, at the decision's time: whatever
// the skew, in every mode, the steps answer alike, with nothing counted
// twice and nothing lost.
func TestCalendarAcrossClocks(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 5, Calendar: window.Day, Zone: "Europe/Berlin"}
	end := time.Date(2026, 3, 30, 0, 0, 0, 0, window.Zone("Europe/Berlin"))
	modes := map[string]Options{
		"script":       {},
		"batch":        {Batch: 8},
		"transactions": {Mode: TransactionsMode},
	}
	n := 0
	for name, o := range modes {
		for _, skew := range []time.Duration{0, time.Second, -time.Second, 3 * time.Minute, -3 * time.Minute, 20 * time.Hour, -20 * time.Hour} {
			n++
			o.Client, o.CallerClock, o.Prefix = c, true, fmt.Sprintf("clocks%d:", n)
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			s.refSkew = skew
			for i, st := range clockSteps {
				r := make([]limit.Result, 1)
				if err := s.Apply(ctx, end.Add(st.at), []limit.Bucket{{Key: "k", Limit: l, Hits: st.hits}}, r); err != nil {
					t.Fatalf("%s, skew %s, step %d: %v", name, skew, i, err)
				}
				if r[0].Admitted != st.admitted || r[0].Remaining != st.remaining || r[0].Reset != st.reset {
					t.Errorf("%s, skew %s, step %d (end%+v, %d hits): admitted %v, remaining %d, reset %s; want %v, %d, %s",
						name, skew, i, st.at, st.hits, r[0].Admitted, r[0].Remaining, r[0].Reset, st.admitted, st.remaining, st.reset)
				}
			}
			if o.Mode == ScriptMode {
				testLeaseAcrossClocks(t, ctx, s, l, end, skew)
			}
			if o.Batch > 0 {
				s.batch.close() // the client is shared
			}
		}
	}
}

// testLeaseAcrossClocks: units leased before the day's end, given back
// after it, are not taken from the new day's count (they ended with the
// 29th), whatever the skew.
func testLeaseAcrossClocks(t *testing.T, ctx context.Context, s *Store, l limit.Limit, end time.Time, skew time.Duration) {
	t.Helper()
	before, after := end.Add(-time.Second), end.Add(time.Second)
	for i, st := range []struct {
		now          time.Time
		ret          int64
		at           time.Time
		ask, granted int64
		counter      int64
	}{
		{before, 0, time.Time{}, 4, 4, 4},
		{after, 0, time.Time{}, 3, 3, 3},
		{after, 2, before, 0, 0, 3}, // the 29th's units: not the 30th's to give back
		{after, 1, after, 5, 3, 5},  // the 30th's: given back, then taken with the rest
	} {
		ls := []Lease{{Key: "lease", Limit: l, Return: st.ret, At: st.at.UnixMicro(), Ask: st.ask}}
		if _, err := s.LeaseAll(ctx, st.now, ls); err != nil {
			t.Fatalf("skew %s, lease step %d: %v", skew, i, err)
		}
		if ls[0].Granted != st.granted || ls[0].State.Counter != st.counter {
			t.Errorf("skew %s, lease step %d: granted %d, counter %d; want %d, %d", skew, i, ls[0].Granted, ls[0].State.Counter, st.granted, st.counter)
		}
	}
}

// TestCalendarOnServerClock: on Redis's own clock, a service clock up to
// a period off still decides; further off, the script refuses the call
// before it writes anything, saying why.
func TestCalendarOnServerClock(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	s, err := New(Options{Client: c, Prefix: "serverclock:"})
	if err != nil {
		t.Fatal(err)
	}
	day := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Calendar: window.Day, Zone: "Asia/Tokyo"}
	week := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Calendar: window.Week, Zone: "America/Los_Angeles"}
	for i, st := range []struct {
		l    limit.Limit
		skew time.Duration
		ok   bool
	}{
		{day, 0, true}, {day, 20 * time.Hour, true}, {day, -20 * time.Hour, true},
		{week, 50 * time.Hour, true}, {week, -50 * time.Hour, true},
		{day, 50 * time.Hour, false}, {day, -50 * time.Hour, false}, {week, 15 * 24 * time.Hour, false},
	} {
		key := fmt.Sprintf("k%d", i)
		r := make([]limit.Result, 1)
		err := s.Apply(ctx, time.Now().Add(st.skew), []limit.Bucket{{Key: key, Limit: st.l, Hits: 1}}, r)
		switch {
		case st.ok && (err != nil || r[0].Remaining != 9):
			t.Errorf("step %d (%v, service clock %s off): %v, %+v; want admitted, 9 remaining", i, st.l, st.skew, err, r[0])
		case !st.ok && (err == nil || !strings.Contains(err.Error(), "differ by more than a period")):
			t.Errorf("step %d (%v, service clock %s off): error %v, want the clocks' difference refused", i, st.l, st.skew, err)
		case !st.ok && c.Exists(ctx, redisKey(s.keyPrefix, key)).Val() != 0:
			t.Errorf("step %d: a refused call wrote its bucket", i)
		}
		ls := []Lease{{Key: key + "lease", Limit: st.l, Ask: 1}}
		if _, err := s.LeaseAll(ctx, time.Now().Add(st.skew), ls); (err == nil) != st.ok {
			t.Errorf("step %d (%v, service clock %s off): lease error %v", i, st.l, st.skew, err)
		}
	}
}

// TestUndoCalendar: both twins of the undo take a calendar window's hits
// back from the period they were charged in, and from no other.
func TestUndoCalendar(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	l := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Calendar: window.Month, Zone: "America/Los_Angeles"}
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, window.Zone("America/Los_Angeles")).UnixMicro()
	held := limit.State{Counter: 5, Timestamp: march}
	for i, tc := range []struct {
		at   time.Time
		want int64
	}{
		{time.Date(2026, 3, 31, 23, 0, 0, 0, window.Zone("America/Los_Angeles")), 3}, // 06:00 UTC on 1 April: still March there
		{time.Date(2026, 4, 1, 0, 0, 0, 0, window.Zone("America/Los_Angeles")), 5},
		{time.Date(2026, 2, 28, 23, 0, 0, 0, window.Zone("America/Los_Angeles")), 5},
	} {
		for mode, exec := range map[string]executor{"script": scriptExec{}, "transactions": txExec{}} {
			key := fmt.Sprintf("undocal|%s|%d", mode, i)
			if mode == "script" {
				c.Set(ctx, key, encodeState(held), time.Hour)
			} else {
				c.HSet(ctx, key, counterField, held.Counter, timestampField, held.Timestamp)
			}
			states, _, err := exec.undo(ctx, &clients{conn: c}, tc.at.UnixMicro(), []string{key}, []change{{limit: l, hits: 2, at: tc.at.UnixMicro()}})
			if err != nil {
				t.Fatalf("%s, step %d: %v", mode, i, err)
			}
			if states[0].Counter != tc.want {
				t.Errorf("%s, step %d (charged at %s): undone to %+v, want a count of %d", mode, i, tc.at, states[0], tc.want)
			}
		}
	}
}
