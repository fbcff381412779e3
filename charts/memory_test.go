package charts

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// deployment renders the chart with vals (named what) and returns its
// Deployment, decoded strictly, and every object rendered.
func deployment(t *testing.T, what string, vals chartutil.Values) (*appsv1.Deployment, map[string][]byte) {
	t.Helper()
	out, err := renderValues(t, what, vals, "rls")
	if err != nil {
		t.Fatalf("render %s: %v", what, err)
	}
	objs := objects(t, out)
	doc := objs["Deployment/rls-envoy-rls"]
	if doc == nil {
		t.Fatalf("%s: no Deployment", what)
	}
	var dep appsv1.Deployment
	decodeStrict(t, what, doc, &dep)
	return &dep, objs
}

// sizePattern is a size as Go reads GOMEMLIMIT and envoy-rls reads
// -memory-max-bytes: a whole number and an optional unit.
var sizePattern = regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?$`)

var decimalUnits = map[string]bool{"KB": true, "MB": true, "GB": true, "TB": true}

// parseSize reads a size; goForm leaves out the decimal units, which Go's
// GOMEMLIMIT does not take.
func parseSize(s string, goForm bool) (int64, bool) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil || (goForm && decimalUnits[m[2]]) {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	factor := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m[2]]
	return n * factor, true
}

// memory is what a Deployment's container gets: its memory limit in
// bytes, each GOMEMLIMIT of its environment, and each -memory-max-bytes
// of its arguments or RLS_MEMORY_MAX_BYTES of its environment (the flag's
// variable, for the drop-in start, which has no arguments).
type memory struct {
	limit      int64
	goMemLimit []string
	maxBytes   []string
}

func memoryOf(dep *appsv1.Deployment) memory {
	c := dep.Spec.Template.Spec.Containers[0]
	m := memory{limit: c.Resources.Limits.Memory().Value()}
	for _, e := range c.Env {
		switch e.Name {
		case "GOMEMLIMIT":
			m.goMemLimit = append(m.goMemLimit, e.Value)
		case "RLS_MEMORY_MAX_BYTES":
			m.maxBytes = append(m.maxBytes, e.Value)
		}
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-memory-max-bytes="); ok {
			m.maxBytes = append(m.maxBytes, v)
		}
	}
	return m
}

// TestMemoryFitsTheLimit renders the chart with its default values, each
// values file of ci/ and the Kubernetes example's: the container must get
// one GOMEMLIMIT, at most 90% of its memory limit, and one
// -memory-max-bytes, at most half of it, so that a full store and the
// heap around it stay under the limit instead of being OOM-killed.
func TestMemoryFitsTheLimit(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("values files in ci/: %v %v", files, err)
	}
	example := filepath.Join("..", "examples", "kubernetes", "values.yaml")
	files = append([]string{"", example}, files...)
	for _, file := range files {
		name := filepath.Base(file)
		switch file {
		case "":
			name = "defaults"
		case example:
			name = "examples-kubernetes"
		}
		t.Run(name, func(t *testing.T) {
			vals := chartutil.Values{}
			if file != "" {
				if vals, err = chartutil.ReadValuesFile(file); err != nil {
					t.Fatal(err)
				}
			}
			m := memoryOf(func() *appsv1.Deployment { d, _ := deployment(t, name, vals); return d }())
			if m.limit == 0 {
				t.Fatal("no memory limit")
			}
			if len(m.goMemLimit) != 1 {
				t.Fatalf("GOMEMLIMIT %q: want one", m.goMemLimit)
			}
			g, ok := parseSize(m.goMemLimit[0], true)
			if !ok {
				t.Fatalf("GOMEMLIMIT=%s: not a size Go reads", m.goMemLimit[0])
			}
			if g*10 > m.limit*9 {
				t.Errorf("GOMEMLIMIT=%s (%d bytes) is more than 90%% of the memory limit, %d bytes", m.goMemLimit[0], g, m.limit)
			}
			if len(m.maxBytes) != 1 {
				t.Fatalf("-memory-max-bytes %q: want one", m.maxBytes)
			}
			b, ok := parseSize(m.maxBytes[0], false)
			if !ok {
				t.Fatalf("-memory-max-bytes=%s: not a size envoy-rls reads", m.maxBytes[0])
			}
			if b*2 > m.limit {
				t.Errorf("-memory-max-bytes=%s (%d bytes) is more than half the memory limit, %d bytes", m.maxBytes[0], b, m.limit)
			}
		})
	}
}

// limit is values with the container's memory limit set to q.
func limit(q any) chartutil.Values {
	return chartutil.Values{"resources": map[string]any{"limits": map[string]any{"memory": q}}}
}

// TestMemoryDerivation: GOMEMLIMIT is 80% of the memory limit and
// -memory-max-bytes half of it, each rounded down to a MiB, unless the
// values give them (once).
func TestMemoryDerivation(t *testing.T) {
	cases := []struct {
		name               string
		vals               chartutil.Values
		goMemLimit, maxMem string
	}{
		{"256Mi", limit("256Mi"), "204MiB", "128MiB"},
		{"1Gi", limit("1Gi"), "819MiB", "512MiB"},
		{"512M", limit("512M"), "390MiB", "244MiB"},
		{"1.5Gi", limit("1.5Gi"), "1228MiB", "768MiB"},
		{"1000000000 as a YAML number", limit(float64(1e9)), "762MiB", "476MiB"},
		{"1000000000 from --set", limit(int64(1e9)), "762MiB", "476MiB"},
		{"64Mi, the least", limit("64Mi"), "51MiB", "32MiB"},
		{"GOMEMLIMIT in env", chartutil.Values{"env": []any{map[string]any{"name": "GOMEMLIMIT", "value": "150MiB"}}}, "150MiB", "128MiB"},
		{"store.memoryMaxBytes", chartutil.Values{"store": map[string]any{"memoryMaxBytes": "100MiB"}}, "204MiB", "100MiB"},
		{"-memory-max-bytes in extraArgs", chartutil.Values{"extraArgs": []any{"-memory-max-bytes=64MiB"}}, "204MiB", "64MiB"},
		{"RLS_MEMORY_MAX_BYTES in env", chartutil.Values{"env": []any{map[string]any{"name": "RLS_MEMORY_MAX_BYTES", "value": "96MiB"}}}, "204MiB", "96MiB"},
		{"Redis: the over-limit cache and local fallback", chartutil.Values{"store": map[string]any{"type": "redis", "redis": map[string]any{"url": "redis://redis:6379"}}}, "204MiB", "128MiB"},
		{"drop-in: by the flag's variable", chartutil.Values{"dropIn": map[string]any{"enabled": true}}, "204MiB", "128MiB"},
		{"no limit, both given", chartutil.Values{
			"resources": map[string]any{"limits": map[string]any{"memory": nil}},
			"env":       []any{map[string]any{"name": "GOMEMLIMIT", "value": "300MiB"}},
			"store":     map[string]any{"memoryMaxBytes": "150MiB"},
		}, "300MiB", "150MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := memoryOf(func() *appsv1.Deployment { d, _ := deployment(t, c.name, c.vals); return d }())
			if len(m.goMemLimit) != 1 || m.goMemLimit[0] != c.goMemLimit {
				t.Errorf("GOMEMLIMIT %q, want %s once", m.goMemLimit, c.goMemLimit)
			}
			if len(m.maxBytes) != 1 || m.maxBytes[0] != c.maxMem {
				t.Errorf("-memory-max-bytes %q, want %s once", m.maxBytes, c.maxMem)
			}
		})
	}
}

// TestQuantityBytes renders the chart's quantity parser (envoy-rls.quantityBytes
// in _helpers.tpl) on its own, and checks it against Kubernetes's where
// Kubernetes reads the quantity too.
func TestQuantityBytes(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	ch.Schema = nil // the values here are the test's own
	ch.Templates = []*chart.File{
		{Name: "templates/_helpers.tpl", Data: helpers(t, ch)},
		{Name: "templates/bytes.txt", Data: []byte(`{{ include "envoy-rls.quantityBytes" (dict "value" .Values.q "what" "q") }}`)},
	}
	bytesOf := func(q any) (string, error) {
		rv, err := chartutil.ToRenderValues(ch, chartutil.Values{"q": q}, chartutil.ReleaseOptions{Name: "rls", Namespace: "rate-limit"}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		out, err := engine.Render(ch, rv)
		return out["envoy-rls/templates/bytes.txt"], err
	}
	cases := []struct {
		q    any
		want int64
	}{
		{"256Mi", 256 << 20},
		{"1Gi", 1 << 30},
		{"512M", 512e6},
		{"1.5Gi", 3 << 29},
		{"1000000000", 1e9},
		{float64(1e9), 1e9}, // a YAML number
		{int64(1e9), 1e9},   // --set
		{"768Ki", 768 << 10},
		{"500k", 500e3},
		{"64K", 64e3},
		{"1.25G", 1.25e9},
		{"2Ti", 2 << 40},
		{"1T", 1e12},
		{"0.1Gi", 107374183}, // rounded up to a byte, as Kubernetes does
		{"3", 3},
	}
	for _, c := range cases {
		got, err := bytesOf(c.q)
		if err != nil {
			t.Errorf("%v: %v", c.q, err)
			continue
		}
		if got != strconv.FormatInt(c.want, 10) {
			t.Errorf("%v: %s bytes, want %d", c.q, got, c.want)
		}
		if s, ok := c.q.(string); ok {
			if k, err := resource.ParseQuantity(s); err == nil && k.Value() != c.want {
				t.Errorf("%v: Kubernetes reads %d bytes, the test wants %d", s, k.Value(), c.want)
			}
		}
	}
	for _, q := range []string{"512m", "256MiB", "1e9", "Gi", "1.2.3Mi", "-1Gi", ""} {
		if got, err := bytesOf(q); err == nil || !strings.Contains(err.Error(), "is not a quantity the chart can read") {
			t.Errorf("%q: %s bytes, %v; want a refusal", q, got, err)
		}
	}
}

// helpers is the chart's _helpers.tpl.
func helpers(t *testing.T, ch *chart.Chart) []byte {
	t.Helper()
	for _, f := range ch.Templates {
		if f.Name == "templates/_helpers.tpl" {
			return f.Data
		}
	}
	t.Fatal("no templates/_helpers.tpl")
	return nil
}
