package memory

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// TestReconcile: read back, a bucket whose limit left the config goes,
// one whose limit counts in another way goes, one whose size (or calendar
// window's zone) changed stays with its count, and one whose key names its
// limit stays.
func TestReconcile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	budget := limit.Limit{Algorithm: limit.FixedWindow, Size: 2_000_000, Window: 30 * 24 * time.Hour}
	s := mustSnapStore(t, path, &now)
	for _, b := range []limit.Bucket{
		{Key: "api|user=alice|#fw30d", Limit: budget, Hits: 1_500_000},
		{Key: "api|user=gone", Limit: leakyLimit, Hits: 1},
		{Key: "api|user=algo", Limit: leakyLimit, Hits: 1},
		{Key: "api|user=slide", Limit: slidingLimit, Hits: 1},
		{Key: "api|user=cal", Limit: calendarLimit, Hits: 1},
		{Key: "api|user=zone", Limit: calendarLimit, Hits: 1},
		{Key: "api|user=bob|#5/minute", Limit: leakyLimit, Hits: 1},
		{Key: "api|user=same", Limit: leakyLimit, Hits: 1},
	} {
		apply(t, s, now, b)
	}
	s.Close()

	lowered := budget
	lowered.Size = 1_000_000
	finer := slidingLimit
	finer.Resolution = time.Minute
	yearly := calendarLimit
	yearly.Calendar = window.Year
	newYork := calendarLimit
	newYork.Zone = "America/New_York"
	current := map[string]*limit.Limit{
		"api|user=alice|#fw30d":  &lowered,
		"api|user=algo":          &fixedLimit,
		"api|user=slide":         &finer,
		"api|user=cal":           &yearly,
		"api|user=zone":          &newYork,
		"api|user=bob|#5/minute": nil, // names its limit
		"api|user=same":          &leakyLimit,
	}
	back := mustSnapStore(t, path, &now)
	r := back.Reconcile(func(key string) (*limit.Limit, bool) {
		l, ok := current[key]
		return l, ok
	})
	if want := (Reconciled{Kept: 4, Resized: 2, Gone: 1, Changed: 3}); r != want {
		t.Errorf("reconciled %+v, want %+v", r, want)
	}
	kept := map[string]bool{}
	for i := range back.shards {
		for k := range back.shards[i].m {
			kept[k] = true
		}
	}
	for _, k := range []string{"api|user=alice|#fw30d", "api|user=bob|#5/minute", "api|user=same", "api|user=zone"} {
		if !kept[k] {
			t.Errorf("%s dropped", k)
		}
	}
	if len(kept) != 4 {
		t.Errorf("kept %v", kept)
	}
	// The budget lowered to 1M, 1.5M of it spent: over it, not a fresh 1M.
	res := apply(t, back, now, limit.Bucket{Key: "api|user=alice|#fw30d", Limit: lowered, Hits: 1})
	if res[0].Admitted {
		t.Errorf("a budget lowered below what was spent admits: %+v", res[0])
	}
}
