package charts

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestDashboardIsTheExample: the chart's dashboards/envoy-rls.json (which
// dashboard.enabled puts in a ConfigMap) is a copy of
// examples/grafana/envoy-rls.json, the one source, byte for byte. The
// chart holds a copy, not a symlink, as Helm warns of symlinks in a chart
// on every command. After changing the example, copy it:
//
//	cp examples/grafana/envoy-rls.json charts/envoy-rls/dashboards/envoy-rls.json
func TestDashboardIsTheExample(t *testing.T) {
	source, err := os.ReadFile(filepath.Join("..", "examples", "grafana", "envoy-rls.json"))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "envoy-rls.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(source, copied) {
		t.Fatal("charts/envoy-rls/dashboards/envoy-rls.json is not examples/grafana/envoy-rls.json: " +
			"cp examples/grafana/envoy-rls.json charts/envoy-rls/dashboards/envoy-rls.json")
	}
}

// TestChartHasNoSymlinks: Helm follows a symlink in a chart, with a
// warning on every command (and a packaged chart holds a copy anyway).
func TestChartHasNoSymlinks(t *testing.T) {
	err := filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("%s is a symlink: make it a file", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
