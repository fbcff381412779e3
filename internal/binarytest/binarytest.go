// Package binarytest builds the envoy-rls binary (and the repository's
// other commands) once per test run, for
// the tests that run it as a process, and collects a process's output
// while it runs.
package binarytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	builds = map[string]*build{} // by command
	dir    string                // where they are built
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of the envoy-rls binary, built once per run from
// the repository at root (a path from the test's directory), with the
// repository's own module versions.
func Build(t testing.TB, root string) string {
	t.Helper()
	return BuildCommand(t, root, "envoy-rls")
}

// BuildCommand returns the path of the binary of ./cmd/name, built once
// per run from the repository at root, as Build builds envoy-rls.
func BuildCommand(t testing.TB, root, name string) string {
	t.Helper()
	mu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		mu.Lock()
		if dir == "" {
			dir, b.err = os.MkdirTemp("", "envoy-rls-bin")
		}
		d := dir
		mu.Unlock()
		if b.err != nil {
			return
		}
		b.path = filepath.Join(d, name)
		cmd := exec.Command("go", "build", "-o", b.path, "./cmd/"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes the binaries Build and BuildCommand made, if any: call
// it once all tests have run (TestMain).
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// Output is a process's output, read while it is written.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
