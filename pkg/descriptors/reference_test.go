package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

// TestStarIsAWildcard: value "*" beside a descriptor of the same key
// without a value is accepted, as envoyproxy/ratelimit accepts it, and
// wins, as there (its wildcards are looked up before the key alone): the
// other is reported as never applying.
func TestStarIsAWildcard(t *testing.T) {
	const file = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    value: "*"
    name: star
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    value: alice
    name: alice
    rate_limit: {unit: second, requests_per_unit: 3}
`
	c, warnings, err := Parse(Source{Name: "a.yaml", Data: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].String(), `a.yaml:3: descriptors[0]: never applies: its sibling with value "*" (line 5)`) {
		t.Errorf("warnings: %v", warnings)
	}
	d := c.Domain("api")
	for value, want := range map[string]string{"bob": "star api|user=bob", "alice": "alice api|user=alice", "": "star api|user="} {
		levels := d.Resolve(entries("user="+value), nil, nil)
		if got := fmt.Sprint(levels[0].Rule.Name, " ", levels[0].Key); len(levels) != 1 || got != want {
			t.Errorf("user=%s: %v, want %s", value, levels, want)
		}
	}
}

// TestShareThresholdOnStar: share_threshold on value "*" gives every value
// one shared bucket, as on any other wildcard.
func TestShareThresholdOnStar(t *testing.T) {
	c, _, err := Parse(Source{Name: "a.yaml", Data: []byte("domain: api\ndescriptors:\n  - key: user\n    value: \"*\"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n")})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("api")
	a, b := d.Resolve(entries("user=alice"), nil, nil), d.Resolve(entries("user=bob"), nil, nil)
	if len(a) != 1 || len(b) != 1 || a[0].Key != b[0].Key || a[0].Key != "api|user=*" {
		t.Errorf("alice %v, bob %v: want one shared bucket api|user=*", a, b)
	}
}

// TestMoreEntriesThanTheTree: with limits on leaves only, a request with
// more entries than its path has nodes gets the limits it matched, where
// envoyproxy/ratelimit (match: leaf) applies none (docs/migration.md).
func TestMoreEntriesThanTheTree(t *testing.T) {
	for match, want := range map[string]int{"all": 1, "leaf": 0} {
		c, _, err := Parse(Source{Name: "a.yaml", Data: []byte("domain: api\nmatch: " + match + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Domain("api").Resolve(entries("user=alice", "extra=1"), nil, nil); len(got) != want {
			t.Errorf("match: %s: %v, want %d levels", match, got, want)
		}
	}
}
