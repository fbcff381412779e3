package leaky

import (
	"fmt"
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
