package descriptors

import (
	"runtime"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors/descriptorstest"
)

// BenchmarkLoadLarge loads 16 MB of config in 4 files (about 190,000
// descriptors), the size a reload must handle without stalling calls.
func BenchmarkLoadLarge(b *testing.B) {
	dir := b.TempDir()
	n := descriptorstest.WriteLarge(b, dir, 4, 4<<20, 0)
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
