package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const dashboardFile = "../../examples/grafana/envoy-rls.json"

// TestDashboardQueriesExportedMetrics: every query of the Grafana
// dashboard names metrics that the service, run as serve runs it, exports
// on /metrics, and only labels those metrics have.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	s := startServe(t, "-config", "../../config")
	c := s.client(t)
	for range 6 { // OK, then OVER_LIMIT at the trade level
		code(t, c, rateRequest("api", "user=alice", "action=trade"))
	}
	_, body := s.get(t, "/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	series := exportedSeries(families)

	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dashboard any
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	queries := dashboardQueries(dashboard)
	if len(queries) < 20 {
		t.Fatalf("%d queries found in %s: its layout changed, or this test reads it wrong", len(queries), dashboardFile)
	}
	named := map[string]bool{}
	for _, q := range queries {
		refs, err := promqlRefs(q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		if len(refs.selectors) == 0 {
			t.Errorf("%s: names no metric", q)
		}
		labels := map[string]bool{}
		for _, sel := range refs.selectors {
			named[sel.name] = true
			have, ok := series[sel.name]
			if !ok {
				t.Errorf("%s: the service exports no %s", q, sel.name)
				continue
			}
			for _, l := range sel.labels {
				if !have[l] {
					t.Errorf("%s: %s has no label %q (it has %v)", q, sel.name, l, slices.Sorted(maps.Keys(have)))
				}
			}
			for l := range have {
				labels[l] = true
			}
		}
		for _, l := range refs.grouping {
			if !labels[l] && l != "instance" && l != "job" { // added by Prometheus at scrape time
				t.Errorf("%s: groups by %q, which none of its metrics has", q, l)
			}
		}
	}
	// What the dashboard is for: decisions, limits, latency, store errors
	// and fallbacks, config reloads.
	for _, m := range []string{"envoy_rls_calls_total", "envoy_rls_limit_decisions_total", "envoy_rls_call_duration_seconds_bucket",
		"envoy_rls_store_duration_seconds_bucket", "envoy_rls_store_errors_total", "envoy_rls_store_fallback", "envoy_rls_config_reloads_total"} {
		if !named[m] {
			t.Errorf("the dashboard has no query of %s", m)
		}
	}
}

// exportedSeries maps each series name a query can select (a histogram's
// _bucket, _sum and _count) to its label names.
func exportedSeries(families map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	add := func(name string, f *dto.MetricFamily, extra ...string) {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		for _, l := range extra {
			labels[l] = true
		}
		out[name] = labels
	}
	for name, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			add(name+"_bucket", f, "le")
			add(name+"_sum", f)
			add(name+"_count", f)
		case dto.MetricType_SUMMARY:
			add(name, f, "quantile")
			add(name+"_sum", f)
			add(name+"_count", f)
		default:
			add(name, f)
		}
	}
	return out
}

// labelValues is Grafana's query of a variable's values, which is not
// PromQL: label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(\s*([^,()]+?)\s*,\s*(\w+)\s*\)$`)

// dashboardQueries returns every PromQL query of a dashboard: the expr of
// every panel target and annotation, and the variables' label_values
// queries, as the PromQL selector metric{label=""}.
func dashboardQueries(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			switch {
			case k == "expr":
				if s, ok := child.(string); ok {
					out = append(out, s)
				}
			case k == "definition":
				if m := labelValues.FindStringSubmatch(fmt.Sprint(child)); m != nil {
					out = append(out, fmt.Sprintf(`%s{%s=""}`, m[1], m[2]))
				}
			default:
				out = append(out, dashboardQueries(child)...)
			}
		}
	case []any:
		for _, child := range x {
			out = append(out, dashboardQueries(child)...)
		}
	}
	return out
}

// refs are what a PromQL expression refers to.
type refs struct {
	selectors []selector
	grouping  []string // labels of by, without, on, ignoring, group_left, group_right
}

type selector struct {
	name   string
	labels []string // of its matchers
}

// promqlKeywords are PromQL's words that are not metric names.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true, "Inf": true, "NaN": true, "inf": true, "nan": true,
}

// groupingWords take a parenthesized list of labels.
var groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlRefs finds the metric selectors of a PromQL expression, with the
// labels of their matchers, and the labels it groups by. It reads tokens:
// an identifier before "(", by or without is a function or an
// aggregation, one after a
// grouping word is a label, one in braces before an operator is a label,
// anything in brackets is a range, and any other identifier that is not a
// keyword is a metric. (Prometheus's own parser lives in a module whose
// requirements would raise this one's Go version and a dozen unrelated
// dependencies.)
func promqlRefs(expr string) (refs, error) {
	toks, err := promqlTokens(expr)
	if err != nil {
		return refs{}, err
	}
	var r refs
	depth := 0
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1].text
		}
		switch {
		case tok.text == "(":
			depth++
		case tok.text == ")":
			if depth--; depth < 0 {
				return refs{}, fmt.Errorf("unbalanced )")
			}
		case tok.text == "[":
			for i < len(toks) && toks[i].text != "]" {
				i++
			}
			if i == len(toks) {
				return refs{}, fmt.Errorf("unclosed [")
			}
		case tok.kind == identToken && groupingWords[tok.text] && next == "(":
			i += 2
			for ; i < len(toks) && toks[i].text != ")"; i++ {
				if toks[i].kind == identToken {
					r.grouping = append(r.grouping, toks[i].text)
				}
			}
			if i == len(toks) {
				return refs{}, fmt.Errorf("unclosed ( after %s", tok.text)
			}
		case tok.kind == identToken && (next == "(" || next == "by" || next == "without"):
			// a function, or an aggregation (sum by (l) (...))
		case tok.kind == identToken && promqlKeywords[tok.text]:
		case tok.kind == identToken || tok.text == "{":
			sel := selector{}
			if tok.text != "{" {
				sel.name = tok.text
				i++
			}
			if i < len(toks) && toks[i].text == "{" {
				var err error
				if i, err = matchers(toks, i, &sel); err != nil {
					return refs{}, err
				}
			} else {
				i--
			}
			if sel.name == "" {
				return refs{}, fmt.Errorf("a selector without a metric name")
			}
			r.selectors = append(r.selectors, sel)
		}
	}
	if depth != 0 {
		return refs{}, fmt.Errorf("unbalanced (")
	}
	return r, nil
}

// matchers reads the matchers of sel from the "{" at toks[i] and returns
// the index of the "}".
func matchers(toks []token, i int, sel *selector) (int, error) {
	for i++; i < len(toks) && toks[i].text != "}"; i++ {
		if toks[i].text == "," {
			continue
		}
		if i+2 >= len(toks) || toks[i].kind != identToken || !slices.Contains([]string{"=", "!=", "=~", "!~"}, toks[i+1].text) || toks[i+2].kind != stringToken {
			return 0, fmt.Errorf("a matcher of %s is not label op \"value\"", sel.name)
		}
		if toks[i].text == "__name__" {
			sel.name = toks[i+2].text
		} else {
			sel.labels = append(sel.labels, toks[i].text)
		}
		i += 2
	}
	if i == len(toks) {
		return 0, fmt.Errorf("unclosed { after %s", sel.name)
	}
	return i, nil
}

type tokenKind int

const (
	identToken tokenKind = iota
	stringToken
	numberToken // numbers, durations, Grafana's $variables
	punctToken
)

type token struct {
	kind tokenKind
	text string // a string's contents, without quotes
}

// promqlTokens cuts a PromQL expression into identifiers, strings,
// numbers (and durations, and Grafana's $variables, which stand for
// either) and punctuation.
func promqlTokens(expr string) ([]token, error) {
	var toks []token
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unclosed string at %d", i)
			}
			toks = append(toks, token{stringToken, expr[i+1 : j]})
			i = j + 1
		case isIdent(c, true):
			j := i + 1
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			toks = append(toks, token{identToken, expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.' || c == '$':
			j := i + 1
			for j < len(expr) && (isIdent(expr[j], false) || expr[j] == '.' || expr[j] == '{' && c == '$' || expr[j] == '}' && c == '$') {
				j++
			}
			toks = append(toks, token{numberToken, expr[i:j]})
			i = j
		default:
			j := i + 1
			if j < len(expr) && strings.ContainsRune("=~", rune(expr[j])) && strings.ContainsRune("=!<>", rune(c)) {
				j++
			}
			toks = append(toks, token{punctToken, expr[i:j]})
			i = j
		}
	}
	return toks, nil
}

// TestPromQLRefs: the reading of PromQL the dashboard test relies on.
func TestPromQLRefs(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{`up`, `up[] by[]`},
		{`sum by (code) (rate(envoy_rls_calls_total{domain=~"$domain"}[$__rate_interval]))`, `envoy_rls_calls_total[domain] by[code]`},
		{`histogram_quantile(0.99, sum by (le, code) (rate(x_bucket[5m])))`, `x_bucket[] by[le code]`},
		{`sum(rate(a{code="OVER_LIMIT",d=~"x|y"}[1m])) / (sum without (i) (rate(b[1m])) > 0)`, `a[code d] b[] by[i]`},
		{`time() - min(c)`, `c[] by[]`},
		{`count by (version, goversion) (envoy_rls_build_info)`, `envoy_rls_build_info[] by[version goversion]`},
		{`a / on (x) group_left (y) b offset 5m`, `a[] b[] by[x y]`},
		{`{__name__="m", job!="j"}`, `m[job] by[]`},
		{`rate(m{l="a \" }"}[1m:10s]) > bool 1e-3`, `m[l] by[]`},
		{`topk(10, sum by (domain, limit) (m))`, `m[] by[domain limit]`},
	} {
		r, err := promqlRefs(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		var got []string
		for _, s := range r.selectors {
			got = append(got, s.name+"["+strings.Join(s.labels, " ")+"]")
		}
		got = append(got, "by["+strings.Join(r.grouping, " ")+"]")
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.expr, g, c.want)
		}
	}
	for _, bad := range []string{`sum(rate(x[5m])`, `x{a="b"`, `x{a}`, `rate(x[5m)`, `"open`, `{job="j"}`} {
		if _, err := promqlRefs(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
