// Package filewatch calls a function when files change, including the way
// Kubernetes updates ConfigMap and Secret volumes: by swapping a ..data
// symlink in the mounted directory, which changes no watched file itself.
package filewatch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls onChange once things have been quiet for debounce after any
// change in the directories that hold paths (a path that is a directory
// counts as one), and in the directories their symlinks point into. It
// returns once the watches are set, and watches until ctx ends.
func Watch(ctx context.Context, paths []string, debounce time.Duration, onChange func(), log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching files: %w", err)
	}
	dirs := map[string]bool{}
	for _, p := range paths {
		for _, d := range watchDirs(p) {
			if dirs[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				w.Close()
				return fmt.Errorf("watching %s: %w", d, err)
			}
			dirs[d] = true
		}
	}
	go func() {
		defer w.Close()
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				log.Debug("file change", "file", ev.Name, "op", ev.Op.String())
				fire = time.After(debounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Error("watching files", "err", err)
			case <-fire:
				fire = nil
				onChange()
			}
		}
	}()
	return nil
}

// watchDirs returns the directories to watch for path.
func watchDirs(path string) []string {
	dir := path
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		dir = filepath.Dir(path)
	}
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		realDir := real
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			realDir = filepath.Dir(real)
		}
		if realDir != dir {
			dirs = append(dirs, realDir)
		}
	}
	return dirs
}
