package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fuzzSeeds are valid configs and each kind of hostile one this package
// has had to handle.
var fuzzSeeds = []string{
	// valid
	"domain: api\n",
	validConfig,
	`domain: edge
match: leaf
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
    detailed_metric: true
  - key: generic_key
    value: foo
    descriptors:
      - key: remote_address
        rate_limit:
          name: per_ip_foo
          unit: MINUTE
          requests_per_unit: 60
          unit_multiplier: 2
          replaces: [{name: per_ip}]
        value_to_metric: true
        quota_mode: true
        metadata: {backend: a}
  - {key: path, value: "/files/*.png", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 1000}}
`,
	"domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: &small {size: 5, drip_rate: 1s}\n  - key: client\n    leaky_bucket: *small\n",
	windowsConfig,
	"domain: api\nrate_limit_algorithm: sliding_window\ndescriptors:\n  - {key: a, rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 4294967295}}\n",
	// windows at their edges, and lists gone wrong
	"domain: api\ndescriptors:\n  - {key: a, sliding_window: {limit: 1099511627777, window: 876001h, resolution: 1us}}\n",
	"domain: api\ndescriptors:\n  - {key: a, limits: [{}, {name: x}, {fixed_window: {limit: 1, window: 1s}, leaky_bucket: {size: 1, drip_rate: 1s}}], rate_limit: {unlimited: true}}\n",
	// a limit replacing itself
	"domain: api\ndescriptors:\n  - key: user\n    name: x\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n",
	// a second document, valid or not
	"domain: api\n---\ndomain: web\n",
	"domain: api\n---\n\n\nfoo: [\n",
	"domain: api\n---\n",
	"---\n",
	"# nothing\n",
	// aliases: a cycle, and a billion laughs
	"domain: api\ndescriptors:\n  - &a {key: a, descriptors: [*a]}\n",
	"domain: api\nx: &a [1,1,1,1,1,1,1,1,1,1]\n" + laughs(9) + "descriptors: [*a9]\n",
	// not YAML, control characters, odd scalars
	"domain: api\n\tdescriptors: []\n",
	"domain: \"a\x01\"\n",
	"domain: api\ndescriptors:\n  - {key: a, leaky_bucket: {size: 0x10, drip_rate: 1us, drip_size: 0o7}, shadow_mode: yes}\n",
	"domain: api\ndescriptors:\n  - {key: a, leaky_bucket: {size: 99999999999999999999, drip_rate: 2562048h}}\n",
	"domain: [a]\n? [x]\n: y\n",
	"domain: api\ndescriptors:\n  - {key: a, value: x}\n  - {key: a, value: x}\n",
	// one mistake repeated through aliases; a long value above descriptors
	"domain: api\nx: &d0 {key: \"\", leaky_bucket: {size: -1, drip_rate: 0s}}\nx1: &d1 {key: k, descriptors: [*d0, *d0, *d0]}\n" +
		"x2: &d2 {key: k, descriptors: [*d1, *d1, *d1]}\ndescriptors: [*d2, *d2]\n",
	"domain: api\ndescriptors:\n  - key: k\n    value: " + strings.Repeat("v", 1000) + "\n    descriptors:\n" +
		strings.Repeat("      - {key: c, leaky_bucket: {size: 1, drip_rate: 1s}, value_to_metric: true}\n", 3),
}

// FuzzParse: no input makes Parse panic or take long, and every problem
// it reports names the file and a line.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	// The project's own configs, where they are.
	for _, pattern := range []string{"../../config/*.yaml", "../../cmd/envoy-rls/testdata/*/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The alias budget bounds the work: the worst found, 3 KB of aliases
		// making 100,000 descriptors, takes 0.2 s; 3 s allows for a busy
		// machine.
		start := time.Now()
		c, warnings, err := Parse(Source{Name: "f.yaml", Data: data})
		if took := time.Since(start); len(data) <= 4096 && took > 3*time.Second {
			t.Fatalf("parsing %d bytes took %v", len(data), took)
		}
		for _, w := range warnings {
			if w.File != "f.yaml" || w.Line < 1 {
				t.Errorf("warning without its place: %+v", w)
			}
		}
		if err != nil {
			var cfgErr *Error
			if !errors.As(err, &cfgErr) || len(cfgErr.Problems) == 0 || c != nil {
				t.Fatalf("got %T %v and config %v, want a *descriptors.Error and no config", err, err, c)
			}
			for _, p := range cfgErr.Problems {
				if p.File != "f.yaml" || p.Line < 1 || p.Msg == "" {
					t.Errorf("problem without its place: %+v", p)
				}
			}
			return
		}
		// The compiled tree serves what its own rules describe.
		c.Describe()
		for _, d := range c.Domains() {
			var levels []Level
			for _, r := range d.Rules() {
				var entries []Entry
				for part := range strings.SplitSeq(r.Path, "/") {
					k, v, _ := strings.Cut(part, "=")
					entries = append(entries, Entry{Key: k, Value: v})
				}
				levels = d.Resolve(entries, nil, levels[:0])
				levels = d.Resolve(entries, r, levels[:0])
				for _, l := range levels {
					l.Rule.MetricLabel(l.Key)
				}
			}
		}
	})
}
