package descriptors

import (
	"testing"
)

const keyRuleConfig = `
domain: "api|v2"
descriptors:
  - key: user
    limits:
      - leaky_bucket: {size: 10, drip_rate: 1s}
      - leaky_bucket: {size: 100, drip_rate: 1m}
      - sliding_window: {limit: 5, window: 1m, resolution: 6s}
      - fixed_window: {limit: 1000, window: 720h}
    descriptors:
      - key: action
        value: trade
        leaky_bucket: {size: 2, drip_rate: 1s}
  - {key: path, value: "/files/*.png", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 1000}}
  - {key: path, value: "/img/*", rate_limit: {unit: hour, requests_per_unit: 10}}
  - key: free
    rate_limit: {unlimited: true}
`

const keyRuleLeafConfig = `
domain: leafy
match: leaf
descriptors:
  - key: a
    leaky_bucket: {size: 1, drip_rate: 1s}
    descriptors:
      - {key: b, leaky_bucket: {size: 2, drip_rate: 1s}}
`

// TestKeyRule: every bucket key Resolve makes leads back to its rule; a
// key the config no longer makes leads nowhere.
func TestKeyRule(t *testing.T) {
	c, _, err := parse(t, "api.yaml", keyRuleConfig, "leafy.yaml", keyRuleLeafConfig)
	if err != nil {
		t.Fatal(err)
	}
	descs := map[string][][]Entry{
		"api|v2": {
			{{"user", "al|ce=%*#{}\x00"}},
			{{"user", "bob"}, {"action", "trade"}},
			{{"path", "/files/a.png"}},
			{{"path", "/img/x|y"}},
		},
		"leafy": {{{"a", "1"}}, {{"a", "1"}, {"b", "2"}}},
	}
	checked := 0
	for domain, ds := range descs {
		d := c.Domain(domain)
		for _, entries := range ds {
			for _, l := range d.Resolve(entries, nil, nil) {
				r, ok := c.KeyRule(l.Key)
				if !ok || r != l.Rule {
					t.Errorf("%q: rule %v, %v; want %s", l.Key, r, ok, l.Rule.Label())
				}
				checked++
			}
		}
	}
	if checked != 13 {
		t.Errorf("%d keys checked, want 13", checked)
	}
	override := &Rule{Path: "(limit sent by Envoy)"}
	override.Rate.RequestsPerUnit, override.Rate.Unit = 5, 2
	for _, l := range c.Domain("api|v2").Resolve([]Entry{{"user", "carol"}}, override, nil) {
		if l.Rule == override {
			if r, ok := c.KeyRule(l.Key); r != nil || !ok {
				t.Errorf("a limit sent by Envoy, %q: %v, %v; want nil and true", l.Key, r, ok)
			}
		}
	}
	for _, key := range []string{
		"web|user=a",            // no such domain
		"api%7Cv2|team=a",       // no such node
		"api%7Cv2|user=a|#lb9",  // no such limit
		"api%7Cv2|user=a|#fw1h", // another window
		"api%7Cv2|free=x",       // unlimited
		"api%7Cv2|user=a%ZZ",    // not escaped as Resolve escapes
		"api%7Cv2|user",         // no value
		"api%7Cv2",              // no level
		"leafy|a=1|b=2|#lb2",
	} {
		if r, ok := c.KeyRule(key); ok {
			t.Errorf("%q: %v, want none", key, r)
		}
	}
}
