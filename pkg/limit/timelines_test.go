package limit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDocumentedTimelines runs the timelines of docs/configuration.md
// ("Algorithms") as written there.
func TestDocumentedTimelines(t *testing.T) {
	minute := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC) // on a minute: windows start here
	for _, tc := range []struct {
		name  string
		limit Limit
		start time.Time
		steps []string // "at hits: outcome"
	}{
		{"leaky bucket", Limit{Size: 3, DripRate: 3 * time.Second, DripSize: 1}, minute, []string{
			"0s 1: admitted, 2 left", "1s 1: admitted, 1 left", "2s 1: admitted, 0 left",
			"2.5s 1: OVER_LIMIT, reset 500ms", "3s 1: admitted, 0 left", "9s 1: admitted, 1 left",
		}},
		{"sliding window", Limit{Algorithm: SlidingWindow, Size: 3, Window: 10 * time.Second, Resolution: time.Second}, minute, []string{
			"0s 1: admitted, 2 left", "500ms 1: admitted, 1 left", "4.2s 1: admitted, 0 left",
			"6s 1: OVER_LIMIT, reset 4s", "10s 1: admitted, 1 left", "14s 1: admitted, 1 left",
		}},
		{"fixed window", Limit{Algorithm: FixedWindow, Size: 3, Window: 10 * time.Second}, minute.Add(7 * time.Second), []string{
			"0s 1: admitted, 2 left", "1s 3: OVER_LIMIT, reset 2s", "1s 1: admitted, 1 left",
			"2.9s 1: admitted, 0 left", "3s 1: admitted, 2 left", "3.1s 2: admitted, 0 left",
		}},
	} {
		var s State
		for _, step := range tc.steps {
			when, want, _ := strings.Cut(step, ": ")
			var at string
			var hits int64
			fmt.Sscanf(when, "%s %d", &at, &hits)
			d, err := time.ParseDuration(at)
			if err != nil {
				t.Fatal(err)
			}
			r := Decide(s, tc.limit, tc.start.Add(d), hits)
			got := fmt.Sprintf("admitted, %d left", r.Remaining)
			if !r.Admitted {
				got = fmt.Sprintf("OVER_LIMIT, reset %s", r.Reset)
			}
			if got != want {
				t.Errorf("%s at %s (%d hits): %s, want %s", tc.name, at, hits, got, want)
			}
			s = r.State
		}
	}
}

// TestUncharge: a window gives back hits from the (sub-)window they went
// to, while it still counts it; never below zero; other windows and a
// leaky bucket are left as they are.
func TestUncharge(t *testing.T) {
	minute := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	sw := Limit{Algorithm: SlidingWindow, Size: 10, Window: 10 * time.Second, Resolution: time.Second}
	s := Decide(State{}, sw, minute, 3).State
	s = Decide(s, sw, minute.Add(2*time.Second), 2).State // counts: [2 0 3 ...]
	for _, c := range []struct {
		at   time.Duration
		hits int64
		want []int64
	}{
		{0, 1, []int64{2, 0, 2}},
		{2 * time.Second, 5, []int64{0, 0, 3}},
		{20 * time.Second, 1, []int64{2, 0, 3}}, // a sub-window it does not count
	} {
		got := Uncharge(s, sw, minute.Add(c.at), c.hits)
		if !slices.Equal(got.Counts[:3], c.want) {
			t.Errorf("at +%s, %d hits: %v, want %v", c.at, c.hits, got.Counts[:3], c.want)
		}
	}
	if s.Counts[0] != 2 || s.Counts[2] != 3 {
		t.Errorf("the state was changed: %v", s.Counts)
	}
	fw := Limit{Algorithm: FixedWindow, Size: 10, Window: time.Minute}
	f := Decide(State{}, fw, minute, 4).State
	if got := Uncharge(f, fw, minute.Add(time.Second), 3); got.Counter != 1 {
		t.Errorf("fixed, same window: %+v", got)
	}
	if got := Uncharge(f, fw, minute.Add(time.Second), 9); !got.Equal(State{}) {
		t.Errorf("fixed, all given back: %+v", got)
	}
	if got := Uncharge(f, fw, minute.Add(-time.Second), 3); got.Counter != 4 {
		t.Errorf("fixed, another window: %+v", got)
	}
	lb := Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	if b := Decide(State{}, lb, minute, 2).State; !Uncharge(b, lb, minute, 2).Equal(b) {
		t.Error("a leaky bucket was changed")
	}
}
