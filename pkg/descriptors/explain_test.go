package descriptors

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// renderWalk writes a walk one step a line, for comparison with a want
// string:
//
//	0 user (any value) line 3: user -> api|user=alex
//	1 action=trade (exact) line 7: trades skipped (limit sent by Envoy)
//	stopped at 2
func renderWalk(w Walk) string {
	var b strings.Builder
	for _, st := range w.Steps {
		fmt.Fprintf(&b, "%d %s (%s) line %d:", st.Entry, joinPath("", st.Key, st.Value), st.Match, st.Line)
		if st.Unlimited {
			b.WriteString(" unlimited")
		}
		for _, l := range st.Limits {
			if l.Skipped != "" {
				fmt.Fprintf(&b, " %s skipped (%s)", l.Rule.Label(), l.Skipped)
			} else {
				fmt.Fprintf(&b, " %s -> %s", l.Rule.Label(), w.Levels[l.Level].Key)
			}
		}
		b.WriteString("\n")
	}
	if w.Override >= 0 {
		fmt.Fprintf(&b, "override -> %s\n", w.Levels[w.Override].Key)
	}
	if w.Unmatched >= 0 {
		fmt.Fprintf(&b, "stopped at %d\n", w.Unmatched)
	}
	if w.Unlimited {
		b.WriteString("unlimited\n")
	}
	return b.String()
}

func TestExplain(t *testing.T) {
	d := mustParse(t, resolveConfig).Domain("api")
	rate := limit.Rate{RequestsPerUnit: 10, Unit: limit.Minute}
	override := &Rule{Path: "override", Limit: rate.Limit(), Rate: rate}
	cases := []struct {
		request  []string
		override *Rule
		want     string
	}{
		{[]string{"user=alex", "action=trade"}, nil,
			"0 user (any value) line 3: user -> api|user=alex\n1 action=trade (exact) line 6: trades -> api|user=alex|action=trade\n"},
		// A node without a limit is a step without limits; the walk stops
		// at the entry nothing matches.
		{[]string{"user=alex", "action=view", "x=y"}, nil,
			"0 user (any value) line 3: user -> api|user=alex\n1 action=view (exact) line 10:\nstopped at 2\n"},
		{[]string{"nobody=1"}, nil, "stopped at 0\n"},
		// The override takes the deepest level's place.
		{[]string{"user=alex", "action=trade"}, override,
			"0 user (any value) line 3: user -> api|user=alex\n1 action=trade (exact) line 6: trades skipped (limit sent by Envoy)\noverride -> api|user=alex|action=trade|#10/minute\n"},
		// An unlimited node skips every limit on the walk.
		{[]string{"user=vip", "action=trade"}, nil,
			"0 user=vip (exact) line 12: unlimited\n1 action=trade (exact) line 16: user=vip/action=trade skipped (unlimited)\nunlimited\n"},
		{[]string{"path=/admin/reports/q3"}, nil,
			"0 path=/admin/reports/* (wildcard) line 22: path=/admin/reports/* -> api|path=/admin/reports/q3\n"},
	}
	for _, c := range cases {
		w := d.Explain(entries(c.request...), c.override)
		if got := renderWalk(w); got != c.want {
			t.Errorf("%v:\ngot\n%s\nwant\n%s", c.request, got, c.want)
		}
	}
}

func TestExplainLeaf(t *testing.T) {
	d := mustParse(t, "domain: api\nmatch: leaf\n"+strings.SplitN(resolveConfig, "\n", 3)[2]).Domain("api")
	w := d.Explain(entries("user=alex", "action=trade"), nil)
	want := "0 user (any value) line 4: user skipped (match: leaf)\n1 action=trade (exact) line 7: trades -> api|user=alex|action=trade\n"
	if got := renderWalk(w); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The walk did not reach the last entry: no level applies.
	w = d.Explain(entries("user=alex", "action=buy"), nil)
	want = "0 user (any value) line 4: user skipped (match: leaf)\nstopped at 1\n"
	if got := renderWalk(w); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestExplainIsResolve walks random requests through every config the
// repository ships (and the tests' own, in both match modes): the levels
// Explain reports are exactly Resolve's, each limit of a step is either
// checked at its own level or skipped with a reason, and the allow list
// agrees with Unlimited.
func TestExplainIsResolve(t *testing.T) {
	configs := map[string]*Config{
		"resolve":      mustParse(t, resolveConfig),
		"resolve-leaf": mustParse(t, "domain: api\nmatch: leaf\n"+strings.SplitN(resolveConfig, "\n", 3)[2]),
		"valid":        mustParse(t, validConfig),
	}
	for _, path := range []string{"../../config", "../../examples/envoy/envoy-rls", "../../cmd/envoy-rls/testdata/envoyproxy", "../../scripts/bench.yaml"} {
		cfg, _, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		configs[path] = cfg
	}
	rng := rand.New(rand.NewPCG(14, 1))
	checked := 0
	for name, cfg := range configs {
		for _, d := range cfg.Domains() {
			for range 2000 {
				es := randomEntries(rng, d)
				var override *Rule
				if rng.IntN(4) == 0 {
					rate := limit.Rate{RequestsPerUnit: uint32(rng.IntN(100)), Unit: limit.Minute}
					override = &Rule{Path: "override", Limit: rate.LimitAs(d.RateLimitAlgorithm), Rate: rate}
				}
				want := d.Resolve(es, override, nil)
				w := d.Explain(es, override)
				if !slices.Equal(w.Levels, want) {
					t.Fatalf("%s %s %v: Explain's levels %v, Resolve's %v", name, d.Name, es, w.Levels, want)
				}
				if err := checkWalk(w, es, d, override); err != nil {
					t.Fatalf("%s %s %v: %v\n%s", name, d.Name, es, err, renderWalk(w))
				}
				checked += len(want)
			}
		}
	}
	if checked < 1000 {
		t.Errorf("only %d levels checked: the random requests miss the configs", checked)
	}
}

// checkWalk checks a walk against itself: every level comes from exactly
// one limit of a step or from the override, and every limit not checked
// says why.
func checkWalk(w Walk, es []Entry, d *Domain, override *Rule) error {
	seen := make([]int, len(w.Levels))
	for i, st := range w.Steps {
		if st.Entry != i || st.Key != es[i].Key {
			return fmt.Errorf("step %d is for entry %d (%s)", i, st.Entry, st.Key)
		}
		for _, l := range st.Limits {
			switch {
			case l.Skipped == "" && l.Level < 0:
				return fmt.Errorf("step %d: limit %s neither checked nor skipped", i, l.Rule.Label())
			case l.Skipped != "" && l.Level >= 0:
				return fmt.Errorf("step %d: limit %s both checked and skipped", i, l.Rule.Label())
			case l.Level >= 0:
				if w.Levels[l.Level].Rule != l.Rule {
					return fmt.Errorf("step %d: limit %s points at level %d of %s", i, l.Rule.Label(), l.Level, w.Levels[l.Level].Rule.Label())
				}
				seen[l.Level]++
			}
		}
	}
	if w.Override >= 0 {
		if w.Levels[w.Override].Rule != override {
			return fmt.Errorf("override at level %d is not the override", w.Override)
		}
		seen[w.Override]++
	}
	for i, n := range seen {
		if n != 1 {
			return fmt.Errorf("level %d reached from %d limits", i, n)
		}
	}
	if (len(w.Steps) < len(es)) != (w.Unmatched == len(w.Steps)) {
		return fmt.Errorf("%d steps for %d entries, unmatched %d", len(w.Steps), len(es), w.Unmatched)
	}
	if w.Unlimited != d.Unlimited(es) {
		return fmt.Errorf("unlimited %v, Domain.Unlimited %v", w.Unlimited, d.Unlimited(es))
	}
	return nil
}

// randomEntries makes a descriptor that walks some way down d's tree:
// each entry the key of a node there, with its value, a value its
// wildcard matches or any value, and now and then an entry nothing
// matches.
func randomEntries(rng *rand.Rand, d *Domain) []Entry {
	var es []Entry
	lv := d.root
	for range 1 + rng.IntN(4) {
		if lv == nil || len(lv.order) == 0 || rng.IntN(10) == 0 {
			es = append(es, Entry{Key: "k" + fmt.Sprint(rng.IntN(3)), Value: "v"})
			lv = nil
			continue
		}
		n := lv.order[rng.IntN(len(lv.order))]
		v := n.value
		switch {
		case n.parts != nil:
			v = strings.Join(n.parts, fmt.Sprint(rng.IntN(100)))
		case v == "" || rng.IntN(8) == 0:
			v = fmt.Sprint("x", rng.IntN(5))
		}
		es = append(es, Entry{Key: n.key, Value: v})
		lv = n.children
	}
	return es
}
