package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/descriptorstest"
	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// newTestReloader returns a reloader of the config in path, with that
// config in force, logging to log.
func newTestReloader(t *testing.T, path string, log *slog.Logger) *reloader {
	t.Helper()
	cfg, _, err := descriptors.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := rls.New(rls.Options{Store: st, Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return &reloader{path: path, svc: svc, metrics: metrics.New(0), log: log}
}

func writeReloadFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// logLines returns the lines of a text log that hold every one of parts.
func logLines(log string, parts ...string) []string {
	var out []string
	for line := range strings.Lines(log) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// TestReloadLogsDomainChanges: a reload that drops domains is legitimate
// but unlimits them, so it is logged at warn naming them; new domains are
// logged at info.
func TestReloadLogsDomainChanges(t *testing.T) {
	dir := t.TempDir()
	limit := "descriptors:\n  - key: user\n    leaky_bucket: {size: 5, drip_rate: 1s}\n"
	writeReloadFile(t, filepath.Join(dir, "a.yaml"), "domain: api\n"+limit)
	writeReloadFile(t, filepath.Join(dir, "b.yaml"), "domain: web\n"+limit)
	writeReloadFile(t, filepath.Join(dir, "c.yaml"), "domain: admin\n"+limit)
	var buf bytes.Buffer
	r := newTestReloader(t, dir, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))

	// A change that keeps every domain warns of nothing.
	writeReloadFile(t, filepath.Join(dir, "c.yaml"), "domain: admin\n"+strings.ReplaceAll(limit, "5", "6"))
	r.reload("test")
	if lines := logLines(buf.String(), "level=WARN"); len(lines) != 0 {
		t.Fatalf("a reload that keeps every domain warns:\n%s", buf.String())
	}
	if len(logLines(buf.String(), "level=INFO", `msg="config reloaded" `)) != 1 {
		t.Fatalf("the changed config was not reloaded:\n%s", buf.String())
	}

	// web's file removed, api renamed to api2: both are no longer limited.
	buf.Reset()
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	writeReloadFile(t, filepath.Join(dir, "a.yaml"), "domain: api2\n"+limit)
	r.reload("test")
	if d := r.svc.Config().Domain("api2"); d == nil {
		t.Fatalf("the new config is not in force:\n%s", buf.String())
	}
	warns := logLines(buf.String(), "level=WARN")
	if len(warns) != 1 || !strings.Contains(warns[0], "removed=api,web") || !strings.Contains(warns[0], "no longer limited") {
		t.Fatalf("want one warning naming api and web as no longer limited, got:\n%s", buf.String())
	}
	if added := logLines(buf.String(), "level=INFO", "added=api2"); len(added) != 1 {
		t.Fatalf("want one info line naming the added domain api2, got:\n%s", buf.String())
	}
}

// TestReloadWithoutConfigInForce: a service started without a config
// (nil) takes the first one without a panic, and logs every domain added.
func TestReloadWithoutConfigInForce(t *testing.T) {
	dir := t.TempDir()
	writeReloadFile(t, filepath.Join(dir, "a.yaml"), "domain: api\n")
	st, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := rls.New(rls.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r := &reloader{path: dir, svc: svc, metrics: metrics.New(0), log: slog.New(slog.NewTextHandler(&buf, nil))}
	r.reload("test")
	if svc.Config() == nil || len(logLines(buf.String(), "level=INFO", "added=api")) != 1 {
		t.Fatalf("the first config: %v\n%s", svc.Config(), buf.String())
	}
}

// TestReloadIgnoresItsOwnDebugLog: with the log written at debug level to
// a file inside the config directory, the log's writes are not config
// changes (they used to be: each event logged, each log line an event, a
// storm of tens of thousands of lines a second). Only a config file's
// change reloads.
func TestReloadIgnoresItsOwnDebugLog(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "api.yaml")
	writeReloadFile(t, config, "domain: api\n")
	logPath := filepath.Join(dir, "envoy-rls.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := newTestReloader(t, dir, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.watch(ctx, true)

	// The service's own debug lines, as calls would write them.
	const written = 100
	for i := range written {
		log.Debug("call", "i", i)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // past the debounce: a reload would have happened
	read := func() string {
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	got := read()
	if n := strings.Count(got, "\n"); n != written {
		t.Fatalf("the log has %d lines, want the %d written: the watcher reacts to its own log:\n%.2000s", n, written, got)
	}

	// A change of the config is still seen.
	writeReloadFile(t, config, "domain: api2\n")
	deadline := time.Now().Add(5 * time.Second)
	for r.svc.Config().Domain("api2") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the config change was not reloaded:\n%s", read())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(logLines(read(), `msg="config reloaded" `)); n != 1 {
		t.Fatalf("%d reloads for one change:\n%s", n, read())
	}
}

func currentGOGC(t *testing.T) int64 {
	t.Helper()
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestReloadCollectsSooner: a reload lowers GOGC while it runs (its
// garbage is collected as it is made), and puts back what was there.
func TestReloadCollectsSooner(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	restore := collectSooner()
	if got := currentGOGC(t); got != reloadGCPercent {
		t.Fatalf("GOGC during a reload: %d", got)
	}
	restore()
	if got := currentGOGC(t); got != 400 {
		t.Fatalf("GOGC after a reload: %d", got)
	}
	// Set by something else meanwhile: that stays.
	restore = collectSooner()
	debug.SetGCPercent(300)
	restore()
	if got := currentGOGC(t); got != 300 {
		t.Fatalf("GOGC set during a reload, after it: %d", got)
	}
	// Lower, or off: left alone.
	for _, gogc := range []int{20, -1} {
		debug.SetGCPercent(gogc)
		restore = collectSooner()
		if got := currentGOGC(t); got != int64(gogc) {
			t.Fatalf("GOGC %d during a reload: %d", gogc, got)
		}
		restore()
	}
}

// procStatusKB reads a field of /proc/self/status, in kB.
func procStatusKB(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestReloadMeasureLarge reloads 16 MB of config while a goroutine calls
// the service with Envoy's 20 ms deadline, and logs the peak memory the
// reload added and the calls' latencies. It is a measurement, not a
// check: RLS_MEASURE=1 runs it.
func TestReloadMeasureLarge(t *testing.T) {
	if os.Getenv("RLS_MEASURE") != "1" {
		t.Skip("a measurement: set RLS_MEASURE=1 to run it")
	}
	if _, ok := os.LookupEnv("GOGC"); !ok {
		defer debug.SetGCPercent(debug.SetGCPercent(400)) // as serve runs (gc.go)
	}
	dir := t.TempDir()
	descriptorstest.WriteLarge(t, dir, 4, 4<<20, 0)
	r := newTestReloader(t, dir, slog.New(slog.DiscardHandler))
	descriptorstest.WriteLarge(t, dir, 4, 4<<20, 1)

	req := &rlsv3.RateLimitRequest{Domain: "d0", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t0000001"}, {Key: "path", Value: "/api/v1/items/7"}},
	}}}
	call := func() (time.Duration, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := r.svc.ShouldRateLimit(ctx, req)
		took := time.Since(start)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "DeadlineExceeded") {
			t.Errorf("call: %v", err)
		}
		return took, err != nil || took > 20*time.Millisecond
	}
	for range 1000 {
		call() // warm up
	}

	// RLS_MEASURE_CALLERS goroutines call, each with a pause of 500µs
	// between calls; with RLS_MEASURE_PAUSE=0, back to back.
	callers, pause := 1, 500*time.Microsecond
	if n, err := strconv.Atoi(os.Getenv("RLS_MEASURE_CALLERS")); err == nil && n > 0 {
		callers = n
	}
	if os.Getenv("RLS_MEASURE_PAUSE") == "0" {
		pause = 0
	}
	latencies := make([]time.Duration, 0, 4<<20) // made now, not while measuring
	// callWhile calls while work runs and describes the calls' latencies.
	callWhile := func(work func()) string {
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			missed int
			done   = make(chan struct{})
		)
		latencies = latencies[:0]
		for range callers {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					took, miss := call()
					mu.Lock()
					if len(latencies) < cap(latencies) {
						latencies = append(latencies, took)
					}
					if miss {
						missed++
					}
					mu.Unlock()
					if pause > 0 {
						time.Sleep(pause)
					}
				}
			})
		}
		work()
		close(done)
		wg.Wait()
		slices.Sort(latencies)
		pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
		return fmt.Sprintf("%d calls by %d goroutines: p50 %v, p99 %v, max %v; %d missed the 20 ms deadline",
			len(latencies), callers, pct(0.5), pct(0.99), latencies[len(latencies)-1], missed)
	}
	// The same calls without a reload, for comparison.
	t.Logf("for 2s without a reload: %s", callWhile(func() { time.Sleep(2 * time.Second) }))

	runtime.GC()
	debug.FreeOSMemory()
	rssBefore := procStatusKB(t, "VmRSS")
	// "5" resets VmHWM to the current RSS (Linux 4.0+), so it is the
	// reload's peak.
	hwmReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	var took time.Duration
	calls := callWhile(func() {
		start := time.Now()
		r.reload("measure")
		took = time.Since(start)
	})
	if r.svc.Config().Domain("d3") == nil {
		t.Fatal("the large config was not reloaded")
	}
	hwm, rssAfter := procStatusKB(t, "VmHWM"), procStatusKB(t, "VmRSS")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("reload of 16 MB took %v; RSS before %d MB, peak %d MB (+%d MB; peak reset: %v), after %d MB; heap in use %d MB, GC cycles %d",
		took.Round(time.Millisecond), rssBefore>>10, hwm>>10, (hwm-rssBefore)>>10, hwmReset, rssAfter>>10, ms.HeapInuse>>20, ms.NumGC)
	t.Logf("during the reload: %s", calls)
}
