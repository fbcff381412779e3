package descriptors

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

const resolveConfig = `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        name: trades
        leaky_bucket: {size: 5, drip_rate: 2s}
      - key: action
        value: view
  - key: user
    value: vip
    rate_limit: {unlimited: true}
    descriptors:
      - key: action
        value: trade
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /admin/*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: /admin/reports/*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /admin/login
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: "*.png"
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: region
    value: eu
    descriptors:
      - key: user
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 0}
`

func entries(pairs ...string) []Entry {
	es := make([]Entry, 0, len(pairs))
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		es = append(es, Entry{Key: k, Value: v})
	}
	return es
}

// describe renders levels as "key -> rule path" lines.
func describeLevels(levels []Level) string {
	var lines []string
	for _, l := range levels {
		lines = append(lines, l.Key+" -> "+l.Rule.Path)
	}
	return strings.Join(lines, "\n")
}

func TestResolve(t *testing.T) {
	d := mustParse(t, resolveConfig).Domain("api")
	cases := []struct {
		request []string
		want    string
	}{
		// Every level with a limit, shallow to deep.
		{[]string{"user=alex", "action=trade"}, "api|user=alex -> user\napi|user=alex|action=trade -> user/action=trade"},
		// A level without a limit adds nothing; the walk goes on below it.
		{[]string{"user=alex", "action=view"}, "api|user=alex -> user"},
		// The walk stops at the first entry no node matches.
		{[]string{"user=alex", "action=buy"}, "api|user=alex -> user"},
		{[]string{"user=alex", "action=buy", "action=trade"}, "api|user=alex -> user"},
		{[]string{"user=alex"}, "api|user=alex -> user"},
		// Any value: one bucket per value.
		{[]string{"user=bob", "action=trade"}, "api|user=bob -> user\napi|user=bob|action=trade -> user/action=trade"},
		// An unlimited node on the walk makes the descriptor unlimited.
		{[]string{"user=vip", "action=trade"}, ""},
		{[]string{"user=vip"}, ""},
		// Exact value, then the longest wildcard, then any value.
		{[]string{"path=/admin/login"}, "api|path=/admin/login -> path=/admin/login"},
		{[]string{"path=/admin/reports/q3"}, "api|path=/admin/reports/q3 -> path=/admin/reports/*"},
		{[]string{"path=/admin/users"}, "api|path=/admin/users -> path=/admin/*"},
		{[]string{"path=/img/logo.png"}, "api|path=/img/logo.png -> path=*.png"},
		{[]string{"path=/about"}, "api|path=/about -> path"},
		// A shared wildcard: every matching value in one bucket.
		{[]string{"path=/files/a.pdf"}, "api|path=/files/* -> path=/files/*"},
		{[]string{"path=/files/b.csv"}, "api|path=/files/* -> path=/files/*"},
		{[]string{"region=eu", "user=bob"}, "api|region=eu|user=bob -> region=eu/user"},
		{[]string{"region=us", "user=bob"}, ""},
		{[]string{"unknown=1"}, ""},
		{[]string{"action=trade"}, ""},
	}
	for _, c := range cases {
		got := describeLevels(d.Resolve(entries(c.request...), nil, nil))
		if got != c.want {
			t.Errorf("%v:\ngot  %q\nwant %q", c.request, got, c.want)
		}
	}
}

func TestResolveRules(t *testing.T) {
	d := mustParse(t, resolveConfig).Domain("api")
	levels := d.Resolve(entries("user=alex", "action=trade"), nil, nil)
	if r := levels[1].Rule; r.Name != "trades" || r.Limit != (limit.Limit{Size: 5, DripRate: 2e9, DripSize: 1}) {
		t.Errorf("trade rule: %+v", r)
	}
	levels = d.Resolve(entries("region=eu", "user=bob"), nil, nil)
	if r := levels[0].Rule; !r.Shadow || r.Limit.Size != 0 || r.Rate != (limit.Rate{RequestsPerUnit: 0, Unit: limit.Day}) {
		t.Errorf("shadow deny rule: %+v", r)
	}
}

func TestResolveOverride(t *testing.T) {
	d := mustParse(t, resolveConfig).Domain("api")
	rate := limit.Rate{RequestsPerUnit: 10, Unit: limit.Minute}
	override := &Rule{Path: "override", Limit: rate.Limit(), Rate: rate}
	cases := []struct {
		request []string
		want    string
	}{
		// The override replaces the limit of the deepest level.
		{[]string{"user=alex", "action=trade"}, "api|user=alex -> user\napi|user=alex|action=trade|#10/minute -> override"},
		{[]string{"user=alex"}, "api|user=alex|#10/minute -> override"},
		{[]string{"user=alex", "action=buy"}, "api|user=alex|#10/minute -> override"},
		{[]string{"user=alex", "action=view"}, "api|user=alex|#10/minute -> override"},
		{[]string{"region=eu", "user=bob"}, "api|region=eu|user=bob|#10/minute -> override"},
		{[]string{"path=/files/a"}, "api|path=/files/*|#10/minute -> override"},
		{[]string{"user=alex", "nothing=here"}, "api|user=alex|#10/minute -> override"},
		// Without a level, it is the descriptor's only one.
		{[]string{"unknown=1", "x=y"}, "api|unknown=1|x=y|#10/minute -> override"},
		// An allow-listed descriptor stays unlimited.
		{[]string{"user=vip"}, ""},
	}
	for _, c := range cases {
		got := describeLevels(d.Resolve(entries(c.request...), override, nil))
		if got != c.want {
			t.Errorf("%v:\ngot  %q\nwant %q", c.request, got, c.want)
		}
	}
	withMultiplier := &Rule{Rate: limit.Rate{RequestsPerUnit: 7, Unit: limit.Second, Multiplier: 30}}
	if got := d.Resolve(entries("user=a"), withMultiplier, nil)[0].Key; got != "api|user=a|#7/30xsecond" {
		t.Errorf("override with multiplier: key %q", got)
	}
}

func TestResolveAppendsToDst(t *testing.T) {
	d := mustParse(t, resolveConfig).Domain("api")
	dst := d.Resolve(entries("user=a"), nil, nil)
	dst = d.Resolve(entries("user=b", "action=trade"), nil, dst)
	if len(dst) != 3 || dst[0].Key != "api|user=a" || dst[2].Key != "api|user=b|action=trade" {
		t.Fatalf("got %s", describeLevels(dst))
	}
}

// TestBucketKeysNeverCollide resolves descriptors whose values contain the
// key format's own characters; every distinct descriptor path must get its
// own key.
func TestBucketKeysNeverCollide(t *testing.T) {
	c := mustParse(t, `
domain: "a|b"
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: "user|action"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: "user=alex|action"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: "x*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: q
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: q
    value: ab
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	d := c.Domain("a|b")
	requests := [][]Entry{
		entries("user=alex", "action=trade"),
		{{"user", "alex|action=trade"}},
		{{"user", "alex"}, {"action", "trade"}},
		{{"user|action", "trade"}},
		{{"user=alex|action", "trade"}},
		{{"user", "alex=trade"}},
		{{"user", "alex%7Caction%3Dtrade"}},
		{{"user", "{alex}"}, {"action", "x"}},
		{{"user", "alex\n"}, {"action", "x"}},
		{{"user", "alex"}, {"action", "x:y"}},
		{{"user", "alex:"}, {"action", "x"}},
		{{"user", "ålex"}, {"action", "日本"}},
		{{"user", "a#1/minute"}},
		{{"p", "xy"}},
		{{"p", "x*"}},
		{{"p", "x"}},
		{{"p", "*"}},
		{{"q", "ab"}},
		{{"q", "abc"}},
		{{"q", "a*"}},
		{{"q", "a%2A"}},
	}
	// Every node of this config has a limit, so level i of a request is the
	// path of its first i+1 entries. Limits sent by Envoy get keys of their own.
	rate := limit.Rate{RequestsPerUnit: 1, Unit: limit.Minute}
	override := &Rule{Path: "override", Limit: rate.Limit(), Rate: rate}
	owner := map[string]string{}
	claim := func(key, path string) {
		if prev, ok := owner[key]; ok && prev != path {
			t.Errorf("key %q is shared by %s and %s", key, prev, path)
		}
		owner[key] = path
	}
	for _, r := range requests {
		plain := d.Resolve(r, nil, nil)
		labels := make([]string, len(plain))
		for i, l := range plain {
			labels[i] = fmt.Sprintf("%q", r[:i+1])
			if l.Rule.Path == "p=x*" {
				labels[i] = "shared p=x*"
			}
			claim(l.Key, labels[i])
		}
		for _, l := range d.Resolve(r, override, nil) {
			if l.Rule == override {
				base := fmt.Sprintf("%q", r)
				if len(plain) > 0 {
					base = labels[len(plain)-1]
				}
				claim(l.Key, "override of "+base)
			}
		}
	}
	if len(owner) < 25 {
		t.Fatalf("only %d distinct keys: %v", len(owner), owner)
	}
}

// decodeKey splits a bucket key back into its unescaped parts, each
// "key=value"; it fails on anything the format does not produce.
func decodeKey(key string) ([]string, error) {
	var parts []string
	for _, p := range strings.Split(key, "|") {
		var b strings.Builder
		for i := 0; i < len(p); i++ {
			switch c := p[i]; {
			case c == '%':
				if i+2 >= len(p) {
					return nil, fmt.Errorf("truncated escape in %q", p)
				}
				v, err := strconv.ParseUint(p[i+1:i+3], 16, 8)
				if err != nil {
					return nil, err
				}
				b.WriteByte(byte(v))
				i += 2
			case c == '=':
				b.WriteString("\x00=\x00") // a separator, distinct from an escaped '='
			case mustEscape(c):
				return nil, fmt.Errorf("unescaped %q in %q", c, p)
			default:
				b.WriteByte(c)
			}
		}
		parts = append(parts, b.String())
	}
	return parts, nil
}

func FuzzBucketKeysDecodeToTheirDescriptor(f *testing.F) {
	for _, s := range [][2]string{{"alex", "trade"}, {"a|b", "c=d"}, {"%7C", "{x}"}, {"\n", "ü"}, {"*", "#1/minute"}, {"", ""}} {
		f.Add(s[0], s[1])
	}
	d := func() *Domain {
		c, _, err := Parse(Source{Name: "f.yaml", Data: []byte(`
domain: "d|{x}"
descriptors:
  - key: "u|="
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
`)})
		if err != nil {
			f.Fatal(err)
		}
		return c.Domain("d|{x}")
	}()
	f.Fuzz(func(t *testing.T, user, action string) {
		levels := d.Resolve([]Entry{{"u|=", user}, {"a", action}}, nil, nil)
		if len(levels) != 2 || !strings.HasPrefix(levels[1].Key, levels[0].Key+"|") {
			t.Fatalf("levels %v: want 2, the first a prefix of the second", levels)
		}
		got, err := decodeKey(levels[1].Key)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"d|{x}", "u|=\x00=\x00" + user, "a\x00=\x00" + action}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("key %q decodes to %q, want %q", levels[1].Key, got, want)
		}
	})
}

func TestResolveAllocations(t *testing.T) {
	d := mustParse(t, resolveConfig).Domain("api")
	req := entries("user=alex", "action=trade")
	dst := make([]Level, 0, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		dst = d.Resolve(req, nil, dst[:0])
	})
	if allocs > 1 {
		t.Errorf("resolving a 2-level descriptor allocates %v times, want at most 1", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() { dst = d.Resolve(entries("nothing=here"), nil, dst[:0]) }); allocs > 1 {
		t.Errorf("resolving an unmatched descriptor allocates %v times", allocs)
	}
}

func BenchmarkResolve(b *testing.B) {
	c, _, err := Parse(Source{Name: "b.yaml", Data: []byte(resolveConfig)})
	if err != nil {
		b.Fatal(err)
	}
	d := c.Domain("api")
	req := entries("user=alex", "action=trade")
	dst := make([]Level, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		dst = d.Resolve(req, nil, dst[:0])
	}
}

func TestMetricLabel(t *testing.T) {
	d := mustParse(t, `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: action
        value: trade
        name: trades
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: action
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 3}
`).Domain("api")
	cases := []struct {
		request []string
		want    []string
	}{
		// Names and paths: bounded by the config, whatever the values.
		{[]string{"user=alice", "action=trade"}, []string{"user", "trades"}},
		// detailed_metric: every level of the path with its value.
		{[]string{"user=alice", "action=view"}, []string{"user", "user=alice/action=view"}},
		// value_to_metric: that level's value, in the labels below it.
		{[]string{"tenant=acme", "path=/a"}, []string{"tenant=acme/path"}},
	}
	for _, c := range cases {
		levels := d.Resolve(entries(c.request...), nil, nil)
		var got []string
		for _, l := range levels {
			got = append(got, l.Rule.MetricLabel(l.Key))
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%v: labels %q, want %q", c.request, got, c.want)
		}
	}
}
