package descriptors

import (
	"strings"
	"testing"
)

// TestReferenceWindowClashes: a node with two fixed windows of the
// reference's units is named, with its file and line; one with a single
// such window, or a leaky bucket beside it, or windows of other lengths,
// is not. As a Check, the clash fails the load.
func TestReferenceWindowClashes(t *testing.T) {
	src := Source{Name: "clash.yaml", Data: []byte(`domain: api
rate_limit_algorithm: fixed_window
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: action
        limits:
          - rate_limit: {unit: second, requests_per_unit: 1}
          - rate_limit: {unit: minute, requests_per_unit: 10}
      - key: page
        limits:
          - rate_limit: {unit: minute, requests_per_unit: 10}
          - leaky_bucket: {size: 5, drip_rate: 1s}
`)}
	cfg, _, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	ps := cfg.ReferenceWindowClashes()
	if len(ps) != 1 || ps[0].File != "clash.yaml" || ps[0].Line != 7 || !strings.Contains(ps[0].Msg, "fixed windows") {
		t.Fatalf("clashes %v, want one at clash.yaml:7 (the action node)", ps)
	}
	if _, _, err := (Options{Check: (*Config).ReferenceWindowClashes}).Parse(src); err == nil || !strings.Contains(err.Error(), "clash.yaml:7") {
		t.Fatalf("loading with the check: %v, want an error at clash.yaml:7", err)
	}
}
