package descriptors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

func parse(t *testing.T, files ...string) (*Config, []Problem, error) {
	t.Helper()
	srcs := make([]Source, 0, len(files)/2)
	for i := 0; i+1 < len(files); i += 2 {
		srcs = append(srcs, Source{Name: files[i], Data: []byte(strings.TrimLeft(files[i+1], "\n"))})
	}
	return Parse(srcs...)
}

func mustParse(t *testing.T, yaml string) *Config {
	t.Helper()
	c, _, err := parse(t, "test.yaml", yaml)
	if err != nil {
		t.Fatalf("config does not load:\n%v", err)
	}
	return c
}

// validConfig uses every kind of node; TestParseValidConfig checks what
// it compiles to, and the fuzz target starts from it.
const validConfig = `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        name: trades
        leaky_bucket: {size: 5, drip_rate: 2s, drip_size: 1}
  - key: path
    value: /admin/*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
  - key: client
    value: abuser
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: plan
    shadow_mode: true
    leaky_bucket: {size: 10, drip_rate: 1s}
`

func TestParseValidConfig(t *testing.T) {
	c, warnings, err := parse(t, "api.yaml", validConfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("unexpected warnings: %v", warnings)
	}
	d := c.Domain("api")
	if d == nil || d.File != "api.yaml" {
		t.Fatalf("domain api not loaded: %+v", d)
	}
	type ruleFields struct {
		Name, Path string
		Limit      limit.Limit
		Rate       limit.Rate
		Shadow     bool
	}
	want := []ruleFields{
		{Path: "user", Limit: limit.Limit{Size: 60, DripRate: time.Second, DripSize: 1}, Rate: limit.Rate{RequestsPerUnit: 60, Unit: limit.Minute}},
		{Name: "trades", Path: "user/action=trade", Limit: limit.Limit{Size: 5, DripRate: 2 * time.Second, DripSize: 1}, Rate: limit.Rate{RequestsPerUnit: 30, Unit: limit.Minute}},
		{Path: "path=/admin/*", Limit: limit.Limit{Size: 100, DripRate: 600 * time.Millisecond, DripSize: 1}, Rate: limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}},
		{Path: "client=abuser", Limit: limit.Limit{Size: 0, DripRate: time.Second, DripSize: 1}, Rate: limit.Rate{RequestsPerUnit: 0, Unit: limit.Second}},
		{Path: "plan", Limit: limit.Limit{Size: 10, DripRate: time.Second, DripSize: 1}, Rate: limit.Rate{RequestsPerUnit: 1, Unit: limit.Second}, Shadow: true},
	}
	rules := d.Rules()
	if len(rules) != len(want) {
		t.Fatalf("got %d rules, want %d", len(rules), len(want))
	}
	for i, r := range rules {
		got := ruleFields{Name: r.Name, Path: r.Path, Limit: r.Limit, Rate: r.Rate, Shadow: r.Shadow}
		if got != want[i] {
			t.Errorf("rule %d: got %+v, want %+v", i, got, want[i])
		}
	}
}

// TestParseRejects checks every kind of invalid config: each must fail with
// the file, the line and the field named.
func TestParseRejects(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want string // expected in the error, "file:line: field: ..." form
	}{
		{"not YAML", "domain: api\ndescriptors: [\n", "bad.yaml:2: invalid YAML: did not find expected node content"},
		{"over_limit_body placeholder misspelt", "domain: api\nover_limit_body: \"wait {retryafter} s\"\n",
			"bad.yaml:2: over_limit_body: has the placeholder {retryafter}: the only one is {retry_after}"},
		{"over_limit_body too long", "domain: api\nover_limit_body: " + strings.Repeat("x", 4097) + "\n",
			"bad.yaml:2: over_limit_body: is 4097 bytes: at most 4096 allowed"},
		{"over_limit_body not text", "domain: api\nover_limit_body: [a]\n", "bad.yaml:2: over_limit_body: must be a string, got a list"},
		{"tab indentation", "domain: api\n\tdescriptors: []\n", "bad.yaml:2: invalid YAML"},
		{"empty file", "", "bad.yaml:1: domain: is required: the file is empty"},
		{"not a mapping", "- a\n- b\n", "bad.yaml:1: must be a mapping of fields, got a list"},
		{"missing domain", "descriptors: []\n", "bad.yaml:1: domain: is required"},
		{"empty domain", "domain: \"\"\n", "bad.yaml:1: domain: must not be empty"},
		{"domain a list", "domain: [a]\n", "bad.yaml:1: domain: must be a string, got a list"},
		{"descriptors not a list", "domain: api\ndescriptors:\n  key: user\n", "bad.yaml:3: descriptors: must be a list, got a mapping"},
		{"descriptor not a mapping", "domain: api\ndescriptors:\n  - user\n", `bad.yaml:3: descriptors[0]: must be a mapping of fields, got "user"`},
		{"missing key", "domain: api\ndescriptors:\n  - value: x\n", "bad.yaml:3: descriptors[0].key: is required"},
		{"empty key", "domain: api\ndescriptors:\n  - key: \"\"\n", "bad.yaml:3: descriptors[0].key: must not be empty"},
		{"duplicate sibling", "domain: api\ndescriptors:\n  - key: user\n  - key: user\n    name: again\n",
			`bad.yaml:4: descriptors[1]: duplicate descriptor: key "user" with any value is already defined on line 3`},
		{"duplicate nested sibling", "domain: api\ndescriptors:\n  - key: user\n    descriptors:\n      - {key: a, value: x}\n      - {key: a, value: x}\n",
			`bad.yaml:6: descriptors[0].descriptors[1]: duplicate descriptor: key "a" with value "x"`},
		{"negative size", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket:\n      size: -1\n      drip_rate: 1s\n",
			"bad.yaml:5: descriptors[0].leaky_bucket.size: must be between 0 and"},
		{"size not a number", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: ten, drip_rate: 1s}\n",
			`bad.yaml:4: descriptors[0].leaky_bucket.size: must be a whole number, got "ten"`},
		{"missing size", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {drip_rate: 1s}\n",
			"bad.yaml:4: descriptors[0].leaky_bucket.size: is required"},
		{"zero drip_rate", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: 0s}\n",
			"bad.yaml:4: descriptors[0].leaky_bucket.drip_rate: must be greater than zero"},
		{"unparsable drip_rate", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: soon}\n",
			`bad.yaml:4: descriptors[0].leaky_bucket.drip_rate: "soon" is not a duration`},
		{"drip_rate without unit", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: 1000}\n",
			`bad.yaml:4: descriptors[0].leaky_bucket.drip_rate: "1000" has no unit`},
		{"drip_rate below a microsecond", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: 1500ns}\n",
			"bad.yaml:4: descriptors[0].leaky_bucket.drip_rate: must be a whole number of microseconds"},
		{"drip_size 0", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: 1s, drip_size: 0}\n",
			"bad.yaml:4: descriptors[0].leaky_bucket.drip_size: must be between 1 and"},
		{"both limits", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: 1s}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:5: descriptors[0]: has both leaky_bucket (line 4) and rate_limit"},
		{"bad unit", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`bad.yaml:4: descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
		{"missing unit", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 1}\n",
			"bad.yaml:4: descriptors[0].rate_limit.unit: is required"},
		{"self-referencing alias", "domain: api\ndescriptors:\n  - &a {key: a, descriptors: [*a]}\n",
			"bad.yaml:3: an alias refers to a node that contains it"},
		{"aliases expanding without end", "domain: api\nx: &a [1,1,1,1,1,1,1,1,1,1]\n" + laughs(7) + "descriptors: [*a7]\n",
			"aliases expand to more than 1000000 nodes"},
		{"control character", "domain: api\ndescriptors:\n  - key: \"a\x01\"\n", "bad.yaml:3: invalid YAML: control characters are not allowed"},
		{"drip_rate over 285 years", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 1, drip_rate: 2562047h}\n",
			"bad.yaml:4: descriptors[0].leaky_bucket.drip_rate: must be at most"},
		{"requests_per_unit negative", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: -5}\n",
			"bad.yaml:4: descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295"},
		{"unlimited with unit", "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			"bad.yaml:5: descriptors[0].rate_limit.unlimited: cannot be combined with unit or requests_per_unit"},
		{"unlimited with requests_per_unit", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 3, unlimited: true}\n",
			"bad.yaml:4: descriptors[0].rate_limit.unlimited: cannot be combined"},
		{"unknown top-level field", "domain: api\ndescriptor: []\n",
			`bad.yaml:2: descriptor: unknown field (did you mean "descriptors"?)`},
		{"unknown descriptor field", "domain: api\ndescriptors:\n  - key: user\n    leaky_buckets: {size: 1, drip_rate: 1s}\n",
			`bad.yaml:4: descriptors[0].leaky_buckets: unknown field (did you mean "leaky_bucket"?)`},
		{"unknown nested field", "domain: api\ndescriptors:\n  - key: user\n    descriptors:\n      - key: action\n        leaky_bucket: {sise: 1, drip_rate: 1s}\n",
			`bad.yaml:6: descriptors[0].descriptors[0].leaky_bucket.sise: unknown field (did you mean "size"?)`},
		{"unknown rate_limit field", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, request_per_unit: 1}\n",
			`bad.yaml:4: descriptors[0].rate_limit.request_per_unit: unknown field (did you mean "requests_per_unit"?)`},
		{"field given twice", "domain: api\ndomain: web\n", "bad.yaml:2: domain: given twice (first on line 1)"},
		{"shadow_mode not a bool", "domain: api\ndescriptors:\n  - key: user\n    shadow_mode: maybe\n",
			`bad.yaml:4: descriptors[0].shadow_mode: must be true or false, got "maybe"`},
		{"two names", "domain: api\ndescriptors:\n  - key: user\n    name: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: b}\n",
			`bad.yaml:5: descriptors[0].rate_limit.name: is "b" but the descriptor's name is "a"`},
		{"two documents", "domain: api\n---\ndomain: web\n", "bad.yaml:2: holds more than one YAML document"},
		{"a second document not YAML", "domain: api\n---\n\n\nfoo: [\n", "bad.yaml:5: invalid YAML: did not find expected node content"},
		{"a second document badly indented", "domain: api\n---\na: b\n  c: d\n", "bad.yaml:4: invalid YAML: mapping values are not allowed"},
		{"a limit replacing itself", "domain: api\ndescriptors:\n  - key: user\n    name: x\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: y\n        - name: x\n",
			`bad.yaml:10: descriptors[0].rate_limit.replaces[1].name: "x" is the name of this limit: a limit cannot replace itself`},
		{"a nested limit replacing itself", "domain: api\ndescriptors:\n  - key: a\n  - key: b\n    descriptors:\n      - key: c\n        rate_limit: {unit: second, requests_per_unit: 1, name: y, replaces: [{name: y}]}\n",
			`bad.yaml:7: descriptors[1].descriptors[0].rate_limit.replaces[0].name: "y" is the name of this limit`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Parse(Source{Name: "bad.yaml", Data: []byte(c.yaml)})
			var cfgErr *Error
			if !errors.As(err, &cfgErr) {
				t.Fatalf("got %v, want a config error containing %q", err, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

// laughs returns YAML lines defining aliases a1..an, each ten times the one
// before ("billion laughs").
func laughs(n int) string {
	var b strings.Builder
	prev := "a"
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("a%d", i)
		fmt.Fprintf(&b, "%s: &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n", "x"+name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	return b.String()
}

func TestParseWarnings(t *testing.T) {
	_, warnings, err := parse(t, "w.yaml", `
domain: api
descriptors:
  - key: client
    value: internal
    rate_limit: {unlimited: true}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: legacy
    rate_limit: {unit: second}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"w.yaml:3: descriptors[0]: the limits below this unlimited descriptor never apply",
		"w.yaml:10: descriptors[1].rate_limit.requests_per_unit: is missing: read as 0",
	}
	if len(warnings) != len(want) {
		t.Fatalf("got warnings %v, want %d", warnings, len(want))
	}
	for i, w := range warnings {
		if !strings.HasPrefix(w.String(), want[i]) {
			t.Errorf("warning %d: got %q, want %q...", i, w, want[i])
		}
	}
}

func TestParseAcceptsAliases(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: user
    leaky_bucket: &small {size: 5, drip_rate: 1s}
  - key: client
    leaky_bucket: *small
`)
	if rules := c.Domain("api").Rules(); len(rules) != 2 || rules[1].Limit != rules[0].Limit {
		t.Fatalf("rules: %+v", rules)
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, _, err := parse(t, "bad.yaml", `
domain: api
descriptors:
  - key: ""
  - key: b
    leaky_bucket: {size: -1, drip_rate: 0s}
`)
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 3 {
		t.Fatalf("got %v, want 3 problems", err)
	}
}

func TestParseRejectsDuplicateDomain(t *testing.T) {
	_, _, err := parse(t, "a.yaml", "domain: api\n", "b.yaml", "# second\ndomain: api\n")
	if err == nil || !strings.Contains(err.Error(), `b.yaml:2: domain: "api" is already defined in a.yaml:1`) {
		t.Fatalf("got %v, want the duplicate domain named with both files", err)
	}
}

func TestParseAcceptsEnvoyproxyRatelimitFiles(t *testing.T) {
	// A file in envoyproxy/ratelimit's own format, with every field it has.
	c, warnings, err := parse(t, "ratelimit.yaml", `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
    detailed_metric: true
  - key: generic_key
    value: foo
    descriptors:
      - key: remote_address
        rate_limit:
          name: per_ip_foo
          unit: MINUTE
          requests_per_unit: 60
          replaces:
            - name: per_ip
        shadow_mode: true
        value_to_metric: true
        quota_mode: true
        metadata:
          backend: a
  - key: path
    value: "/files/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: bypass
    rate_limit:
      unlimited: true
  - key: banned
    rate_limit:
      unit: day
      requests_per_unit: 0
  - key: placeholder
`)
	if err != nil {
		t.Fatal(err)
	}
	rules := c.Domain("edge").Rules()
	if len(rules) != 4 || rules[1].Name != "per_ip_foo" || !rules[1].Shadow || rules[1].Rate != (limit.Rate{RequestsPerUnit: 60, Unit: limit.Minute}) {
		t.Fatalf("rules loaded wrong: %+v", rules)
	}
	if !rules[1].QuotaMode || fmt.Sprint(rules[1].Metadata) != "map[backend:a]" {
		t.Errorf("quota_mode and metadata read wrong: %+v", rules[1])
	}
	for _, w := range warnings {
		if f := w.Field[strings.LastIndex(w.Field, ".")+1:]; f == "quota_mode" || f == "metadata" {
			t.Errorf("a warning for %s, which is read: %v", f, w)
		}
	}
}

func TestWarningsAreGivenOncePerFieldAndFile(t *testing.T) {
	_, warnings, err := parse(t, "w.yaml", `
domain: api
descriptors:
  - key: a
    quota_mode: true
  - key: b
    quota_mode: true
  - key: c
    quota_mode: true
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.HasSuffix(warnings[0].Msg, "(and 2 more places in this file)") || warnings[0].Line != 4 {
		t.Fatalf("got %v, want one warning on line 4 counting 2 more places", warnings)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\n")
	write("b.yml", "domain: b\n")
	write("c.YAML", "domain: c\n")
	write("notes.txt", "not config")
	write(".hidden.yaml", "not: [valid")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, _, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range c.Domains() {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("loaded domains %v, want a, b and c", names)
	}
}

func TestLoadConfigMapVolume(t *testing.T) {
	// A Kubernetes ConfigMap volume: the files are links through ..data,
	// itself a link to a timestamped directory.
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "api.yaml"), []byte("domain: api\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	c, _, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Domain("api") == nil || len(c.Files()) != 1 {
		t.Fatalf("loaded %v from a ConfigMap volume, want api.yaml once", c.Files())
	}
}

func TestLoadErrors(t *testing.T) {
	if _, _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: got %v", err)
	}
	if _, _, err := Load(t.TempDir()); !errors.Is(err, ErrNoConfig) {
		t.Errorf("empty directory: got %v, want ErrNoConfig", err)
	}
}

func TestDescribe(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s}
    descriptors:
      - {key: action, value: trade, name: trades, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: path, value: "/f/*", share_threshold: true, detailed_metric: true, rate_limit: {unit: hour, requests_per_unit: 9}}
  - {key: client, value: internal, rate_limit: {unlimited: true}}
`)
	got, err := json.Marshal(c.Describe())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"files":["test.yaml"],"domains":[{"domain":"api","file":"test.yaml","descriptors":[` +
		`{"key":"user","limit":{"algorithm":"leaky_bucket","size":60,"drip_rate":"1s","drip_size":1,"reported_as":"60/minute"},"descriptors":[` +
		`{"key":"action","value":"trade","name":"trades","limit":{"algorithm":"leaky_bucket","size":5,"drip_rate":"12s","drip_size":1,"reported_as":"5/minute"},"shadow_mode":true}]},` +
		`{"key":"path","value":"/f/*","limit":{"algorithm":"leaky_bucket","size":9,"drip_rate":"6m40s","drip_size":1,"reported_as":"9/hour"},"share_threshold":true,"detailed_metric":true},` +
		`{"key":"client","value":"internal","unlimited":true}]}]}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
