package descriptors

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestReplacesOtherLimits: replacing another limit is still accepted, and
// a name that no limit has is a warning on the name's line.
func TestReplacesOtherLimits(t *testing.T) {
	c, warnings, err := parse(t, "r.yaml", `
domain: api
descriptors:
  - key: user
    name: per_user
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: plan
        value: gold
        rate_limit:
          unit: second
          requests_per_unit: 100
          name: gold
          replaces:
            - name: per_user
            - name: nothing
`)
	if err != nil {
		t.Fatal(err)
	}
	if rules := c.Domain("api").Rules(); len(rules) != 2 || len(rules[1].Replaces) != 2 || rules[1].Replaces[0] != "per_user" {
		t.Fatalf("rules: %+v", rules)
	}
	want := `r.yaml:15: descriptors[0].descriptors[0].rate_limit.replaces[1].name: no limit of this domain is named "nothing"`
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0].String(), want) {
		t.Fatalf("warnings %v, want one starting %q", warnings, want)
	}
}

// TestPlainTreeIsNoAliasBomb: a large tree without aliases is what the file
// spells out, however many nodes it has; only what aliases add is bounded.
func TestPlainTreeIsNoAliasBomb(t *testing.T) {
	wide := func(n int, alias *yaml.Node) *yaml.Node {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Line: 1, Content: make([]*yaml.Node, n)}
		x := &yaml.Node{Kind: yaml.ScalarNode, Line: 2, Value: "x"} // one node n times: cheaper, counted alike
		for i := range seq.Content {
			seq.Content[i] = x
		}
		root := &yaml.Node{Kind: yaml.MappingNode, Line: 1, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "a"}, seq}}
		if alias != nil {
			seq.Anchor = "a"
			alias.Alias = seq
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "b"}, alias)
		}
		return root
	}
	if p := checkAliases(wide(2*maxAliasNodes, nil)); p != nil {
		t.Fatalf("a plain tree of %d nodes: %v", 2*maxAliasNodes, p)
	}
	// An alias adding the bound's worth of nodes passes; one more fails, on
	// the alias's line.
	if p := checkAliases(wide(maxAliasNodes-1, &yaml.Node{Kind: yaml.AliasNode, Line: 7})); p != nil {
		t.Fatalf("an alias adding %d nodes: %v", maxAliasNodes, p)
	}
	p := checkAliases(wide(maxAliasNodes, &yaml.Node{Kind: yaml.AliasNode, Line: 7}))
	if p == nil || p.Line != 7 || p.Msg != fmt.Sprintf("aliases expand to more than %d nodes", maxAliasNodes) {
		t.Fatalf("an alias adding %d nodes: got %+v", maxAliasNodes+1, p)
	}
}

// TestAliasBombIsCheapToRefuse: a billion laughs is refused without
// walking what it would expand to, on the line where the aliases met so
// far pass the bound (xa5's, whose aliases add 111,111 nodes each).
func TestAliasBombIsCheapToRefuse(t *testing.T) {
	var err error
	made := allocated(func() {
		_, _, err = parse(t, "bomb.yaml", "domain: api\nx: &a [1,1,1,1,1,1,1,1,1,1]\n"+laughs(9)+"descriptors: [*a9, *a9]\n")
	})
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 1 || cfgErr.Problems[0].Line != 7 ||
		!strings.Contains(err.Error(), "aliases expand to more than 1000000 nodes") {
		t.Fatalf("got %v", err)
	}
	if made > 64<<20 {
		t.Fatalf("refusing allocated %d MB", made>>20)
	}
}

// allocated returns the bytes f allocates. What refusing a hostile file
// costs is counted in bytes rather than time, which a shared machine makes
// say little.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSmallAndLargeLevelsMatchAlike: a level of a few nodes is searched and
// a larger one indexed; both give the same precedence.
func TestSmallAndLargeLevelsMatchAlike(t *testing.T) {
	nodes := `
  - {key: path, leaky_bucket: {size: 1, drip_rate: 1s}}
  - {key: path, value: "/a*", leaky_bucket: {size: 2, drip_rate: 1s}}
  - {key: path, value: "/a/b*", leaky_bucket: {size: 3, drip_rate: 1s}}
  - {key: path, value: "/a/b/c", leaky_bucket: {size: 4, drip_rate: 1s}}
  - {key: path, value: "*.png", leaky_bucket: {size: 5, drip_rate: 1s}}
  - {key: user, value: "/a/b/c", leaky_bucket: {size: 6, drip_rate: 1s}}
`
	filler := ""
	for i := range smallLevel {
		filler += fmt.Sprintf("  - {key: filler, value: f%d}\n", i)
	}
	small := mustParse(t, "domain: api\ndescriptors:"+nodes).Domain("api")
	large := mustParse(t, "domain: api\ndescriptors:"+nodes+filler).Domain("api")
	if small.root.byKey != nil || large.root.byKey == nil {
		t.Fatal("the levels are not one small and one large")
	}
	for _, c := range []struct {
		key, value string
		size       int64 // 0: no match
	}{
		{"path", "/a/b/c", 4}, {"path", "/a/b/cd", 3}, {"path", "/a/x", 2}, {"path", "/a/b.png", 3},
		{"path", "/x.png", 5}, {"path", "/x", 1}, {"path", "", 1}, {"user", "/a/b/c", 6}, {"user", "x", 0}, {"nope", "x", 0},
	} {
		for name, d := range map[string]*Domain{"small": small, "large": large} {
			levels := d.Resolve([]Entry{{c.key, c.value}}, nil, nil)
			var got int64
			if len(levels) == 1 {
				got = levels[0].Rule.Limit.Size
			}
			if got != c.size {
				t.Errorf("%s level, %s=%s: matched the limit of size %d, want %d", name, c.key, c.value, got, c.size)
			}
		}
	}
}

// TestProblemsAreBounded: aliases can repeat a mistake 100,000 times from
// a few hundred bytes; the problems listed are bounded, and the last one
// says how many more there are.
func TestProblemsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: api\nx: &d0 {key: \"\", leaky_bucket: {size: -1, drip_rate: 0s}}\n")
	for i := 1; i <= 4; i++ {
		p := fmt.Sprintf("*d%d", i-1)
		fmt.Fprintf(&b, "x%d: &d%d {key: k, descriptors: [%s]}\n", i, i, strings.Repeat(p+",", 9)+p)
	}
	b.WriteString("descriptors: [*d4, *d4, *d4, *d4, *d4, *d4]\n") // 6 x 10,000 descriptors, 4 errors each
	_, _, err := parse(t, "amp.yaml", b.String())
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != maxProblems+1 {
		t.Fatalf("got %d problems, want %d and a summary", len(cfgErr.Problems), maxProblems)
	}
	last := cfgErr.Problems[maxProblems].String()
	if want := "amp.yaml:2: and 239904 more errors in this file, the first on this line: only the first 100 are listed"; last != want {
		t.Fatalf("last problem %q, want %q", last, want)
	}

	// Warnings too.
	warn := strings.Replace(b.String(), `{key: "", leaky_bucket: {size: -1, drip_rate: 0s}}`, "{key: a, share_threshold: true}", 1)
	_, warnings, err := parse(t, "amp.yaml", warn)
	if err == nil || len(warnings) != maxProblems+1 || !strings.Contains(warnings[maxProblems].Msg, "more warnings in this file") {
		t.Fatalf("got %d warnings (%v), want %d and a summary", len(warnings), err, maxProblems)
	}
}

// TestLongPathsAreBounded: a long value above many descriptors repeats in
// each one's path; half a megabyte of file would compile to half a
// gigabyte of paths (and a few megabytes to all the memory there is).
func TestLongPathsAreBounded(t *testing.T) {
	file := func(children int) string {
		var b strings.Builder
		b.WriteString("domain: api\ndescriptors:\n  - key: k\n    value: " + strings.Repeat("v", 100<<10) + "\n    descriptors:\n")
		for i := range children {
			fmt.Fprintf(&b, "      - {key: c, value: x%d, leaky_bucket: {size: 1, drip_rate: 1s}}\n", i)
		}
		return b.String()
	}
	// 100 such paths are 10 MB: allowed.
	if _, _, err := parse(t, "long.yaml", file(100)); err != nil {
		t.Fatal(err)
	}
	var err error
	long := file(5000)
	made := allocated(func() { _, _, err = parse(t, "long.yaml", long) })
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 1 {
		t.Fatalf("got %v, want one problem", err)
	}
	if p := cfgErr.Problems[0]; p.Line < 4 || !strings.HasPrefix(p.Field, "descriptors[0].descriptors[") ||
		!strings.Contains(p.Msg, "paths and keys add up to more than") {
		t.Fatalf("got %v", p)
	}
	// Half a gigabyte of paths must never be made: what the budget allows,
	// and the parse, are a fraction of it.
	if limit := uint64(4 * compileBudget(len(long))); made > limit {
		t.Fatalf("refusing allocated %d MB, over %d MB", made>>20, limit>>20)
	}
}

// TestMessagesQuoteLittle: a long value is clipped in messages, which an
// alias could otherwise repeat in a hundred problems of megabytes each.
func TestMessagesQuoteLittle(t *testing.T) {
	long := strings.Repeat("é", 1<<19) // a megabyte, two bytes a rune
	var b strings.Builder
	b.WriteString("domain: api\nx: &v " + long + "\ndescriptors:\n")
	for i := range 50 {
		fmt.Fprintf(&b, "  - {key: k%d, leaky_bucket: {size: *v, drip_rate: *v}, *v: 1}\n", i)
	}
	_, _, err := parse(t, "long.yaml", b.String())
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != maxProblems+1 {
		t.Fatalf("got %v", err)
	}
	if n := len(err.Error()); n > 100*300 {
		t.Fatalf("the error is %d bytes long", n)
	}
	// Line 2: where the aliased value is.
	if want := `long.yaml:2: descriptors[0].leaky_bucket.size: must be a whole number, got "` + long[:64] + `..."`; cfgErr.Problems[2].String() != want {
		t.Fatalf("got  %s\nwant %s", cfgErr.Problems[2], want)
	}
}
