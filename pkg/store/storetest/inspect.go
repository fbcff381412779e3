package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Inspector is a store whose buckets can be read without charging them,
// and reset: what the service's explain and admin endpoints need.
type Inspector interface {
	Store
	// State returns the stored state of each bucket, changing nothing,
	// and the instant it is for (now, or the store's own clock).
	State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error)
	// Reset empties the buckets with these keys.
	Reset(ctx context.Context, keys []string) error
}

// NewInspector returns an empty store for one subtest, deciding at the
// instants it is given, as NewStore.
type NewInspector func(t *testing.T) Inspector

// RunInspect runs the suite of State and Reset against the stores
// newStore makes: limit.DecideAll on the states State reads decides
// exactly what Apply then decides, for every algorithm; State charges
// nothing; Reset empties the buckets named and no others.
func RunInspect(t *testing.T, newStore NewInspector) {
	t.Run("StatePredictsApply", func(t *testing.T) { testStatePredicts(t, newStore(t)) })
	t.Run("StateOfNothingIsEmpty", func(t *testing.T) { testStateEmpty(t, newStore(t)) })
	t.Run("ResetEmpties", func(t *testing.T) { testReset(t, newStore(t)) })
}

// states reads buckets' states at now, failing the test on error.
func states(t *testing.T, s Inspector, now time.Time, buckets []limit.Bucket) []limit.State {
	t.Helper()
	out := make([]limit.State, len(buckets))
	at, err := s.State(context.Background(), now, buckets, out)
	if err != nil {
		t.Fatalf("State at %s: %v", now.Format(time.StampMicro), err)
	}
	if !at.Equal(now) {
		t.Fatalf("State at %s says it read at %s: the suite needs the caller's clock", now.Format(time.StampMicro), at.Format(time.StampMicro))
	}
	return out
}

// testStatePredicts charges random requests over buckets of every
// algorithm, whose keys span several Redis Cluster slots, and before each
// asks State: limit.DecideAll on what it reads must give what Apply gives.
func testStatePredicts(t *testing.T, s Inspector) {
	rng := rand.New(rand.NewPCG(14, 2))
	const sec = time.Second
	pool := []limit.Bucket{
		bucket("api|u=a", limit.Limit{Size: 5, DripRate: 700 * ms, DripSize: 1}, 0),
		bucket("api|u=a|x=1", limit.Limit{Size: 3, DripRate: 2 * sec, DripSize: 2}, 0),
		bucket("api|u=a|#sw2s/200ms", Sliding(6, 2*sec, 200*ms), 0),
		bucket("api|u=b", Fixed(4, sec), 0),
		bucket("api|u=b|x=1", limit.Limit{Size: 0, DripRate: sec, DripSize: 1}, 0),
		bucket("api|u=c|#sw1s/100ms", Sliding(3, sec, 0), 0),
	}
	now := T0
	admitted, rejected := 0, 0
	for step := range 300 {
		now = now.Add(time.Duration(rng.IntN(400)) * ms)
		var req []limit.Bucket
		for _, b := range pool {
			if rng.IntN(3) == 0 {
				b.Hits = int64(rng.IntN(4)) // 0 peeks
				b.Shadow = rng.IntN(8) == 0
				req = append(req, b)
			}
		}
		if len(req) == 0 {
			continue
		}
		before := states(t, s, now, req)
		again := states(t, s, now, req)
		for i := range before {
			if !before[i].Equal(again[i]) {
				t.Fatalf("step %d: State changed bucket %q from %+v to %+v", step, req[i].Key, before[i], again[i])
			}
		}
		want := make([]limit.Result, len(req))
		ok := limit.DecideAll(before, req, now, want)
		results := make([]limit.Result, len(req))
		if err := s.Apply(context.Background(), now, req, results); err != nil {
			t.Fatalf("step %d: Apply: %v", step, err)
		}
		for i, r := range results {
			w := want[i]
			if r.Admitted != w.Admitted || r.Remaining != w.Remaining || r.Clear != w.Clear || r.Reset != w.Reset {
				t.Fatalf("step %d, bucket %q (%v, %d hits): State and DecideAll predicted %s, Apply decided %s",
					step, req[i].Key, req[i].Limit, req[i].Hits, show(w), show(r))
			}
		}
		if ok {
			admitted++
		} else {
			rejected++
		}
	}
	if admitted < 20 || rejected < 20 {
		t.Fatalf("%d requests admitted and %d rejected: the run does not test both", admitted, rejected)
	}
}

func show(r limit.Result) string {
	return fmt.Sprint(outcome{r.Admitted, r.Remaining, r.Clear, r.Reset})
}

func testStateEmpty(t *testing.T, s Inspector) {
	req := []limit.Bucket{
		bucket("never|lb", limit.Limit{Size: 5, DripRate: ms, DripSize: 1}, 1),
		bucket("never|sw", Sliding(5, time.Second, 0), 1),
		bucket("never|fw", Fixed(5, time.Second), 1),
	}
	for i, st := range states(t, s, T0, req) {
		if st.Counter != 0 || len(st.Counts) != 0 {
			t.Errorf("bucket %q never charged: state %+v, want empty", req[i].Key, st)
		}
	}
}

func testReset(t *testing.T, s Inspector) {
	lb := limit.Limit{Size: 2, DripRate: time.Hour, DripSize: 1}
	sw := Sliding(2, time.Hour, time.Minute)
	fw := Fixed(2, time.Hour)
	full := []limit.Bucket{bucket("r|lb", lb, 2), bucket("r|sw", sw, 2), bucket("r|fw", fw, 2), bucket("other|lb", lb, 2)}
	apply(t, s, T0, full)
	for i, st := range states(t, s, T0, full) {
		if st.Counter != 2 {
			t.Fatalf("bucket %q charged 2: state %+v", full[i].Key, st)
		}
	}
	if got := apply(t, s, T0, full[:1]); got[0].admitted {
		t.Fatal("a full bucket admitted more")
	}
	if err := s.Reset(context.Background(), []string{"r|lb", "r|sw", "r|fw", "r|never-charged"}); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	after := states(t, s, T0.Add(ms), full)
	for i, st := range after[:3] {
		if st.Counter != 0 || len(st.Counts) != 0 {
			t.Errorf("bucket %q after Reset: state %+v, want empty", full[i].Key, st)
		}
	}
	if after[3].Counter != 2 {
		t.Errorf("bucket %q not reset: state %+v, want it as it was", full[3].Key, after[3])
	}
	got := apply(t, s, T0.Add(ms), full[:3])
	// As if never charged: two drips of an hour; the sub-window of
	// 05:06:00 leaves at 06:06:00; the window of 05:00 ends at 06:00.
	want := []outcome{{true, 0, 2 * time.Hour, 0}, {true, 0, time.Hour - 7*time.Second - ms, 0}, {true, 0, 53*time.Minute + 53*time.Second - ms, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a full request after Reset: got %v, want %v", got, want)
	}
	if err := s.Reset(context.Background(), nil); err != nil {
		t.Errorf("Reset of no keys: %v", err)
	}
}
