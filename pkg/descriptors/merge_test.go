package descriptors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parseMerged(t *testing.T, files ...string) (*Config, []Problem, error) {
	t.Helper()
	var srcs []Source
	for i := 0; i+1 < len(files); i += 2 {
		srcs = append(srcs, Source{Name: files[i], Data: []byte(strings.TrimLeft(files[i+1], "\n"))})
	}
	return Options{MergeDomains: true}.Parse(srcs...)
}

// TestMergeDomains: two files of one domain, each with a top-level
// descriptor the other lacks: both limits apply (envoyproxy/ratelimit's
// TestDomainMerge), and each step of a walk names the file it is in.
func TestMergeDomains(t *testing.T) {
	c, _, err := parseMerged(t,
		"one.yaml", `
domain: shop
descriptors:
  - key: team
    value: red
    rate_limit: {unit: minute, requests_per_unit: 10}
`,
		"two.yaml", `
# the second file
domain: shop
descriptors:
  - key: team
    value: blue
    rate_limit: {unit: minute, requests_per_unit: 20}
`)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("shop")
	for _, x := range []struct {
		entry string
		want  uint32
		file  string
		line  int
	}{{"team=red", 10, "one.yaml", 3}, {"team=blue", 20, "two.yaml", 4}} {
		levels := d.Resolve(entries(x.entry), nil, nil)
		if len(levels) != 1 || levels[0].Rule.Rate.RequestsPerUnit != x.want {
			t.Errorf("%s: %v, want its limit of %d", x.entry, describeLevels(levels), x.want)
		}
		w := d.Explain(entries(x.entry), nil)
		if len(w.Steps) != 1 || w.Steps[0].File != x.file || w.Steps[0].Line != x.line {
			t.Errorf("%s: explained as %+v, want %s:%d", x.entry, w.Steps, x.file, x.line)
		}
	}
	if levels := d.Resolve(entries("team=green"), nil, nil); len(levels) != 0 {
		t.Errorf("team=green: %v, want no limit", describeLevels(levels))
	}
	if got := strings.Join(d.Files(), ","); got != "one.yaml,two.yaml" || d.File != "one.yaml" || len(d.Rules()) != 2 {
		t.Errorf("files %s (File %s), rules %d: want one.yaml,two.yaml and 2 rules", got, d.File, len(d.Rules()))
	}
	if got := strings.Join(c.Files(), ","); got != "one.yaml,two.yaml" {
		t.Errorf("config's files %s", got)
	}
	desc, _ := json.Marshal(c.Describe())
	if !strings.Contains(string(desc), `"file":"one.yaml","merged_files":["two.yaml"]`) ||
		!strings.Contains(string(desc), `"value":"red"`) || !strings.Contains(string(desc), `"value":"blue"`) {
		t.Errorf("described as %s", desc)
	}
}

// TestMergeDomainsPrecedence: merged top-level descriptors match as one
// level: an exact value of one file before the any-value of the other,
// on small levels and on those large enough to be indexed.
func TestMergeDomainsPrecedence(t *testing.T) {
	for _, extra := range []int{0, 8} {
		var more strings.Builder
		for i := range extra {
			fmt.Fprintf(&more, "  - {key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
		}
		c, _, err := parseMerged(t,
			"any.yaml", "domain: d\ndescriptors:\n  - {key: user, rate_limit: {unit: second, requests_per_unit: 1}}\n"+more.String(),
			"alice.yaml", "domain: d\ndescriptors:\n  - {key: user, value: alice, rate_limit: {unit: second, requests_per_unit: 2}}\n")
		if err != nil {
			t.Fatal(err)
		}
		d := c.Domain("d")
		for entry, want := range map[string]string{"user=alice": "user=alice", "user=bob": "user"} {
			if levels := d.Resolve(entries(entry), nil, nil); len(levels) != 1 || levels[0].Rule.Path != want {
				t.Errorf("%d more: %s resolves to %v, want %s", extra, entry, describeLevels(levels), want)
			}
		}
	}
}

// TestMergeDomainsCollisions: a top-level descriptor in two files is an
// error, even with other children (envoyproxy/ratelimit's
// TestDuplicateKeyDomainMerge); so are settings of the whole domain that
// differ. Each is named at the second file's line, with the first's.
func TestMergeDomainsCollisions(t *testing.T) {
	for _, c := range []struct {
		name, first, second, want string
	}{
		{"the same top-level descriptor", "domain: d\ndescriptors:\n  - key: user\n    value: alice\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"domain: d\ndescriptors:\n  - key: path\n  - key: user\n    value: alice\n    descriptors:\n      - {key: action, rate_limit: {unit: second, requests_per_unit: 5}}\n",
			`b.yaml:4: descriptors[1]: duplicate descriptor: key "user" with value "alice" is already defined in a.yaml:3`},
		{"match", "domain: d\nmatch: leaf\n", "domain: d\n",
			`b.yaml:1: match: all here, leaf in a.yaml: the files of domain "d" are merged, and must agree on it`},
		{"rate_limit_algorithm", "domain: d\n", "# fixed\ndomain: d\nrate_limit_algorithm: fixed_window\n",
			`b.yaml:2: rate_limit_algorithm: fixed_window here, leaky_bucket in a.yaml`},
		{"over_limit_body", "domain: d\nover_limit_body: slow down\n", "domain: d\n",
			`b.yaml:1: over_limit_body: "" here, "slow down" in a.yaml`},
	} {
		_, _, err := parseMerged(t, "a.yaml", c.first, "b.yaml", c.second)
		var cfgErr *Error
		if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 1 || !strings.HasPrefix(cfgErr.Problems[0].String(), c.want) {
			t.Errorf("%s: got %v, want one problem starting %q", c.name, err, c.want)
		}
	}
	// A value and no value are two descriptors, as in the reference.
	if _, _, err := parseMerged(t, "a.yaml", "domain: d\ndescriptors:\n  - key: user\n", "b.yaml", "domain: d\ndescriptors:\n  - key: user\n    value: bob\n"); err != nil {
		t.Errorf("user and user=bob: %v", err)
	}
	// Without merging, a domain in two files is an error still.
	if _, _, err := parse(t, "a.yaml", "domain: d\n", "b.yaml", "domain: d\n"); err == nil || !strings.Contains(err.Error(), "MERGE_DOMAIN_CONFIG") {
		t.Errorf("without merging: %v, want the duplicate domain, with the setting that merges", err)
	}
}

// TestLoadDotFiles: files whose name starts with a dot are read with
// DotFiles, never a Kubernetes volume's own ..entries, and a directory
// still not walked into.
func TestLoadDotFiles(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		filepath.Join(data, "api.yaml"):    "domain: api\n",
		filepath.Join(dir, ".hidden.yaml"): "domain: hidden\n",
		filepath.Join(dir, "..odd.yaml"):   "not: [valid",
	} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts Options
		want string
	}{{Options{}, "api"}, {Options{DotFiles: true}, "api,hidden"}} {
		cfg, _, err := c.opts.Load(dir)
		if err != nil {
			t.Fatalf("%+v: %v", c.opts, err)
		}
		var names []string
		for _, d := range cfg.Domains() {
			names = append(names, d.Name)
		}
		if strings.Join(names, ",") != c.want {
			t.Errorf("%+v: loaded %v from %v, want %s", c.opts, names, cfg.Files(), c.want)
		}
	}
	for name, want := range map[string]bool{".a.yaml": true, "..data": false, "..a.yaml": false, ".a.txt": false, "a.yml": true} {
		if got := (Options{DotFiles: true}).IsConfigFile(name); got != want {
			t.Errorf("IsConfigFile(%q) with DotFiles: %v", name, got)
		}
	}
}

// TestMergeDomainsReplacesAcrossFiles: a replaces naming a limit of
// another file of the merged domain is no warning; one naming no limit of
// the domain still is, at its file and line.
func TestMergeDomainsReplacesAcrossFiles(t *testing.T) {
	_, warnings, err := parseMerged(t,
		"one.yaml", `
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
`,
		"two.yaml", `
domain: shop
descriptors:
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: per_user
        - name: nothing
`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range warnings {
		if strings.Contains(w.Msg, "replaces nothing") {
			got = append(got, fmt.Sprintf("%s:%d %s", w.File, w.Line, w.Msg))
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "two.yaml:9 ") || !strings.Contains(got[0], `"nothing"`) {
		t.Fatalf("replaces warnings %q, want one, for \"nothing\" at two.yaml:9", got)
	}
}
