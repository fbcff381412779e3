package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

// TestChargeNodeBeatsFileBeatsDefault: a node's charge beats its file's,
// which beats the loader's default.
func TestChargeNodeBeatsFileBeatsDefault(t *testing.T) {
	file := func(fileCharge string) string {
		return "domain: api\n" + fileCharge + `descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tokens
    charge: always
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: requests
    charge: admitted
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	}
	for _, tc := range []struct {
		def        Charge
		fileCharge string
		want       string // Always of plain, tokens, requests
	}{
		{ChargeAdmitted, "", "false true false"},
		{ChargeAlways, "", "true true false"},
		{ChargeAdmitted, "charge: always\n", "true true false"},
		{ChargeAlways, "charge: admitted\n", "false true false"},
	} {
		c, _, err := Options{Charge: tc.def}.Parse(Source{Name: "c.yaml", Data: []byte(file(tc.fileCharge))})
		if err != nil {
			t.Fatal(err)
		}
		r := c.Domain("api").Rules()
		if got := fmt.Sprint(r[0].Always, r[1].Always, r[2].Always); got != tc.want {
			t.Errorf("default %v, file %q: %s, want %s", tc.def, tc.fileCharge, got, tc.want)
		}
	}
}

// TestMatchDefault: the loader's default match (leaf, for the reference's
// environment) applies to files without match; match: all overrides it.
func TestMatchDefault(t *testing.T) {
	for _, tc := range []struct {
		leaf  bool
		match string
		want  bool
	}{{false, "", false}, {true, "", true}, {true, "match: all\n", false}, {false, "match: leaf\n", true}} {
		c, _, err := Options{Leaf: tc.leaf}.Parse(Source{Name: "m.yaml", Data: []byte("domain: api\n" + tc.match + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Domain("api").Leaf(); got != tc.want {
			t.Errorf("default leaf %v, %q: leaf %v, want %v", tc.leaf, tc.match, got, tc.want)
		}
	}
}

// TestQuotaModeAndMetadata: quota_mode and metadata are read onto the
// node's limits; metadata keeps YAML's types as protobuf's Struct holds
// them, and aliases share one reading.
func TestQuotaModeAndMetadata(t *testing.T) {
	c := mustParse(t, `
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: &m
      service_with_quota: {name: service_1}
      weight: 3
      cost: 1.5
      canary: false
      tags: [a, 2]
      none: null
  - key: service
    value: service_2
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: *m
`)
	r := c.Domain("rl").Rules()
	if !r[0].QuotaMode || r[1].QuotaMode {
		t.Fatalf("quota mode: %v %v, want true false", r[0].QuotaMode, r[1].QuotaMode)
	}
	want := "map[canary:false cost:1.5 none:<nil> service_with_quota:map[name:service_1] tags:[a 2] weight:3]"
	if got := fmt.Sprint(r[0].Metadata); got != want {
		t.Fatalf("metadata %s, want %s", got, want)
	}
	if _, ok := r[0].Metadata["weight"].(float64); !ok {
		t.Errorf("a number is %T, want float64", r[0].Metadata["weight"])
	}
	if fmt.Sprintf("%p", r[0].Metadata) != fmt.Sprintf("%p", r[1].Metadata) {
		t.Error("an alias read its metadata again instead of sharing it")
	}
}

// TestUsageFieldErrors: a wrong value names the file, line and field.
func TestUsageFieldErrors(t *testing.T) {
	deep := "x"
	for range maxMetadataDepth + 2 {
		deep = "{a: " + deep + "}"
	}
	many := "[" + strings.Repeat("1, ", maxMetadataValues) + "1]"
	for _, tc := range []struct{ yaml, want string }{
		{"charge: sometimes\ndescriptors: []\n", `e.yaml:2: charge: "sometimes": want admitted`},
		{"descriptors:\n  - key: k\n    charge: [always]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "e.yaml:4: descriptors[0].charge: must be a string, got a list"},
		{"descriptors:\n  - key: k\n    quota_mode: yes please\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "e.yaml:4: descriptors[0].quota_mode: must be true or false"},
		{"descriptors:\n  - key: k\n    metadata: [a, b]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "e.yaml:4: descriptors[0].metadata: must be a mapping of keys to values, got a list"},
		{"descriptors:\n  - key: k\n    metadata: {a: 1, a: 2}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "descriptors[0].metadata"},
		{"descriptors:\n  - key: k\n    metadata: " + deep + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "levels deep"},
		{"descriptors:\n  - key: k\n    metadata: {m: " + many + "}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "holds more than 10000 values"},
	} {
		_, _, err := parse(t, "e.yaml", "domain: api\n"+tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestUsageFieldsWithoutLimitWarn: quota_mode, charge and metadata on a
// node without a limit do nothing, and say so once per file.
func TestUsageFieldsWithoutLimitWarn(t *testing.T) {
	_, warnings, err := parse(t, "w.yaml", `
domain: api
descriptors:
  - key: a
    charge: always
    metadata: {x: 1}
    descriptors:
      - key: b
        charge: always
        rate_limit: {unit: second, requests_per_unit: 1}
`)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(warnings)
	for _, want := range []string{"w.yaml:4: descriptors[0].charge: has no effect", "w.yaml:5: descriptors[0].metadata: has no effect"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings %s: want %q", got, want)
		}
	}
	if len(warnings) != 2 {
		t.Errorf("%d warnings, want 2: %v", len(warnings), warnings)
	}
}

// TestScope: scope: region keeps a node's limits to each region, global
// (the default) divides them; any other value is an error at
// file:line:field, and a scope on a node without a limit says it does
// nothing.
func TestScope(t *testing.T) {
	c, warnings, err := parse(t, "s.yaml", `
domain: api
descriptors:
  - key: shared
    rate_limit: {unit: second, requests_per_unit: 60}
  - key: mine
    scope: region
    limits:
      - rate_limit: {unit: second, requests_per_unit: 10}
      - fixed_window: {limit: 100, window: 1m}
  - key: said
    scope: global
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: none
    scope: region
`)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Domain("api").Rules()
	if got := fmt.Sprint(r[0].Regional, r[1].Regional, r[2].Regional, r[3].Regional); got != "false true true false" {
		t.Errorf("regional: %s, want false true true false", got)
	}
	if got := fmt.Sprint(warnings); len(warnings) != 1 || !strings.Contains(got, "s.yaml:14: descriptors[3].scope: has no effect") {
		t.Errorf("warnings %s", got)
	}
	if _, _, err := parse(t, "e.yaml", "domain: api\ndescriptors:\n  - key: k\n    scope: planet\n    rate_limit: {unit: second, requests_per_unit: 1}\n"); err == nil ||
		!strings.Contains(err.Error(), `e.yaml:4: descriptors[0].scope: "planet": want global`) {
		t.Errorf("a bad scope: %v", err)
	}
}
