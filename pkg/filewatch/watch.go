// Package filewatch calls a function when files change, including the way
// Kubernetes updates ConfigMap and Secret volumes: by swapping a ..data
// symlink in the mounted directory, which changes no watched file itself.
//
// Only changes to the watched files count: other files in the same
// directories (a log file, an editor's swap file) may change as often as
// they like without a call or a log line. That matters when the program's
// own log is written next to its config: were each of its writes a change,
// each change logged would be another change.
package filewatch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// dataLink is the symlink Kubernetes swaps to update a mounted volume.
const dataLink = "..data"

// Option changes what Watch does.
type Option func(*options)

type options struct {
	keep func(name string) bool
}

// Filter makes a change to a file directly in a watched directory count
// only when keep accepts the file's name (its base name). Without it every
// name not starting with '.' counts. A watched file always counts, and so
// does a Kubernetes ..data swap.
func Filter(keep func(name string) bool) Option {
	return func(o *options) { o.keep = keep }
}

// target is something whose changes count: a file, or (name "") the files
// of a directory that keep accepts.
type target struct {
	dir, name string
}

// Watch calls onChange once things have been quiet for debounce after a
// change to one of paths (a path that is a directory counts for the files
// directly in it, see Filter), to the files their symlinks point to, or to
// a Kubernetes ..data link next to them. It returns once the watches are
// set, and watches until ctx ends.
func Watch(ctx context.Context, paths []string, debounce time.Duration, onChange func(), log *slog.Logger, opts ...Option) error {
	o := options{keep: func(name string) bool { return !strings.HasPrefix(name, ".") }}
	for _, opt := range opts {
		opt(&o)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching files: %w", err)
	}
	var targets []target
	dirs := map[string]bool{}
	for _, p := range paths {
		for _, t := range targetsOf(p) {
			targets = append(targets, t)
			if dirs[t.dir] {
				continue
			}
			if err := w.Add(t.dir); err != nil {
				w.Close()
				return fmt.Errorf("watching %s: %w", t.dir, err)
			}
			dirs[t.dir] = true
		}
	}
	counts := func(name string) bool {
		dir, base := filepath.Dir(name), filepath.Base(name)
		if base == dataLink {
			return dirs[dir]
		}
		for _, t := range targets {
			if t.dir == dir && (t.name == base || (t.name == "" && o.keep(base))) {
				return true
			}
		}
		return false
	}
	go func() {
		defer w.Close()
		var (
			fire   <-chan time.Time
			last   fsnotify.Event
			events int
		)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !counts(ev.Name) {
					continue // not even logged: it may be the log itself
				}
				last, events = ev, events+1
				fire = time.After(debounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Error("watching files", "err", err)
			case <-fire:
				log.Debug("files changed", "file", last.Name, "op", last.Op.String(), "events", events)
				fire, events = nil, 0
				onChange()
			}
		}
	}()
	return nil
}

// targetsOf returns what counts as a change of path: path itself, and what
// it resolves to through symlinks.
func targetsOf(path string) []target {
	t := func(p string) target {
		p = filepath.Clean(p)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return target{dir: p}
		}
		return target{dir: filepath.Dir(p), name: filepath.Base(p)}
	}
	ts := []target{t(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		if rt := t(real); rt != ts[0] {
			ts = append(ts, rt)
		}
	}
	return ts
}
