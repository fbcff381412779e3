package filewatch

import (
	"context"
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
