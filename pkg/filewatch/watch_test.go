package filewatch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// configMap lays out a directory as Kubernetes mounts a ConfigMap: each
// file a link through ..data, itself a link to a timestamped directory.
func configMap(t *testing.T, dir, version, content string) {
	t.Helper()
	data := filepath.Join(dir, "..v"+version)
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "api.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// The swap: a new link renamed over ..data, atomically.
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "api.yaml")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "api.yaml"), link); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("onChange called %d times, want %d", n.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfigMapSwap(t *testing.T) {
	for _, watchFile := range []bool{false, true} {
		dir := t.TempDir()
		configMap(t, dir, "1", "domain: a\n")
		var calls atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		path := dir
		if watchFile {
			path = filepath.Join(dir, "api.yaml")
		}
		if err := Watch(ctx, []string{path}, 20*time.Millisecond, func() { calls.Add(1) }, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		configMap(t, dir, "2", "domain: b\n")
		waitFor(t, &calls, 1)
		if got, _ := os.ReadFile(filepath.Join(dir, "api.yaml")); string(got) != "domain: b\n" {
			t.Fatalf("the link reads %q after the swap", got)
		}
		// Bursts of events are one call.
		time.Sleep(100 * time.Millisecond)
		if n := calls.Load(); n != 1 {
			t.Fatalf("watching %s: %d calls for one swap, want 1", path, n)
		}
		cancel()
	}
}

func TestPlainFileEdit(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(file, []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Watch(ctx, []string{file}, 20*time.Millisecond, func() { calls.Add(1) }, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("domain: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &calls, 1)
	// An editor's save: a new file renamed over the old one.
	tmp := filepath.Join(dir, ".api.yaml.swp")
	os.WriteFile(tmp, []byte("domain: c\n"), 0o644)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &calls, 2)
}

func TestWatchMissingPath(t *testing.T) {
	err := Watch(context.Background(), []string{filepath.Join(t.TempDir(), "nope", "api.yaml")}, time.Millisecond, func() {}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("watching a path in a directory that does not exist succeeded")
	}
}

// TestOtherFilesDoNotCount: files next to the watched ones (a log, an
// editor's swap file, a file the filter refuses) change without a call,
// however often; the watched ones still count.
func TestOtherFilesDoNotCount(t *testing.T) {
	isYAML := func(name string) bool { return filepath.Ext(name) == ".yaml" && name[0] != '.' }
	for _, c := range []struct {
		name  string
		watch func(dir string) string
		opts  []Option
	}{
		{"file", func(dir string) string { return filepath.Join(dir, "api.yaml") }, nil},
		{"directory with a filter", func(dir string) string { return dir }, []Option{Filter(isYAML)}},
		{"directory", func(dir string) string { return dir }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "api.yaml")
			if err := os.WriteFile(config, []byte("domain: a\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := Watch(ctx, []string{c.watch(dir)}, 10*time.Millisecond, func() { calls.Add(1) }, slog.New(slog.DiscardHandler), c.opts...); err != nil {
				t.Fatal(err)
			}
			others := []string{filepath.Join(dir, ".api.yaml.swp")}
			if c.opts != nil || c.name == "file" {
				others = append(others, filepath.Join(dir, "envoy-rls.log"))
			}
			if c.name == "file" {
				others = append(others, filepath.Join(dir, "web.yaml"))
			}
			for i := range 50 {
				for _, o := range others {
					f, err := os.OpenFile(o, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(f, "line %d\n", i)
					f.Close()
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := os.Remove(others[0]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // well past the debounce
			if n := calls.Load(); n != 0 {
				t.Fatalf("%d calls for changes to %v only", n, others)
			}
			if err := os.WriteFile(config, []byte("domain: b\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			waitFor(t, &calls, 1)
		})
	}
}

// TestDirectoryFilter: in a watched directory, a file the filter accepts
// counts, even one that is new.
func TestDirectoryFilter(t *testing.T) {
	dir := t.TempDir()
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keep := func(name string) bool { return filepath.Ext(name) == ".yaml" }
	if err := Watch(ctx, []string{dir}, 10*time.Millisecond, func() { calls.Add(1) }, slog.New(slog.DiscardHandler), Filter(keep)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if calls.Load() != 0 {
		t.Fatal("a file the filter refuses counted")
	}
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &calls, 1)
}

// TestIgnoredEventsAreNotLogged: an event that does not count writes no
// log line, even at debug (the log may be the file that changed).
func TestIgnoredEventsAreNotLogged(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(config, []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var lines atomic.Int64
	log := slog.New(countHandler{&lines})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	if err := Watch(ctx, []string{dir}, 10*time.Millisecond, func() { calls.Add(1) }, log, Filter(func(string) bool { return false })); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, "other"), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(60 * time.Millisecond)
	if n := lines.Load(); n != 0 || calls.Load() != 0 {
		t.Fatalf("%d log lines and %d calls for ignored events", n, calls.Load())
	}
}

// countHandler counts the records logged, at every level.
type countHandler struct{ n *atomic.Int64 }

func (h countHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h countHandler) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h countHandler) WithGroup(string) slog.Handler             { return h }
