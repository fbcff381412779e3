// Package descriptorstest makes config files for tests and benchmarks of
// the packages that load configs.
package descriptorstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteLarge writes files config files d0.yaml, d1.yaml... of about
// bytesPerFile each into dir, one domain each, and returns how many
// descriptors they hold. version changes every limit, so that two versions
// differ everywhere.
func WriteLarge(t testing.TB, dir string, files, bytesPerFile, version int) int {
	t.Helper()
	count := 0
	for f := range files {
		var b strings.Builder
		fmt.Fprintf(&b, "domain: d%d\ndescriptors:\n", f)
		for i := 0; b.Len() < bytesPerFile; i++ {
			fmt.Fprintf(&b, `  - key: tenant
    value: t%07d
    name: tenant_%d
    leaky_bucket: {size: %d, drip_rate: 1s}
    descriptors:
      - key: path
        value: /api/v1/items/*
        rate_limit: {unit: minute, requests_per_unit: %d}
      - key: method
        value: POST
        rate_limit: {unit: second, requests_per_unit: 10}
`, i, i, 100+version, 600+version)
			count += 3
		}
		// Written whole and renamed, so that a watcher never reads half.
		path := filepath.Join(dir, fmt.Sprintf("d%d.yaml", f))
		if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	return count
}
