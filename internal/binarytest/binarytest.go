// Package binarytest builds the envoy-rls binary once per test run, for
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
	once     sync.Once
	built    string
	buildErr error
)

// Build returns the path of the envoy-rls binary, built once per run from
// the repository at root (a path from the test's directory), with the
// repository's own module versions.
func Build(t testing.TB, root string) string {
	t.Helper()
	once.Do(func() {
		dir, err := os.MkdirTemp("", "envoy-rls-bin")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "envoy-rls")
		cmd := exec.Command("go", "build", "-o", built, "./cmd/envoy-rls")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// Remove deletes the binary Build made, if any: call it once all tests
// have run (TestMain).
func Remove() {
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
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
