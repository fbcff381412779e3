package descriptors

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeLargeConfig writes files domains of about bytesPerFile each, in
// dir, and returns how many descriptors they hold. version changes every
// limit, so that two versions differ everywhere.
func writeLargeConfig(t testing.TB, dir string, files, bytesPerFile, version int) int {
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
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("d%d.yaml", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return count
}

// BenchmarkLoadLarge loads 16 MB of config in 4 files (about 190,000
// descriptors), the size a reload must handle without stalling calls.
func BenchmarkLoadLarge(b *testing.B) {
	dir := b.TempDir()
	n := writeLargeConfig(b, dir, 4, 4<<20, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, _, err := Load(dir)
		if err != nil {
			b.Fatal(err)
		}
		if got := len(c.Domain("d0").Rules()); got == 0 || got > n {
			b.Fatalf("%d rules", got)
		}
	}
	b.ReportMetric(float64(n), "descriptors")

	// The heap the loaded config holds: a reload holds two for a moment.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, _, _ := Load(dir)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "live-MB")
}
