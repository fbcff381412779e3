package integration

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// budgetConfig is a budget of 5 a month per user.
const budgetConfig = `domain: api
descriptors:
  - key: user
    name: monthly
    fixed_window: {limit: 5, window: 720h}
`

// budgetReplica starts the binary with the budget and a memory snapshot
// at snap.
func budgetReplica(t *testing.T, snap string, args ...string) (*process, *replica) {
	t.Helper()
	return binaryReplica(t, budgetConfig, append([]string{"-memory-snapshot", snap}, args...)...)
}

// spend calls for user until one is over the budget, at most 10 times,
// and returns how many were admitted.
func spend(t *testing.T, r *replica, user string) int {
	t.Helper()
	for i := range 10 {
		if r.call(t, request([]string{"user=" + user})).GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			return i
		}
	}
	t.Fatalf("%s: 10 calls admitted by a budget of 5", user)
	return 0
}

func charge(t *testing.T, r *replica, user string, n int) {
	t.Helper()
	for i := range n {
		if code := r.call(t, request([]string{"user=" + user})).GetOverallCode(); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%s, call %d: %v", user, i+1, code)
		}
	}
}

// exited waits for the process to end and returns its error (nil: exit 0).
func exited(t *testing.T, p *process) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("envoy-rls did not exit within 15s; output:\n%s", p.out)
		return nil
	}
}

// TestSnapshotSIGTERM: a budget spent on a memory store, charges made
// during -shutdown-delay included, is still spent after SIGTERM and a
// new start.
func TestSnapshotSIGTERM(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	p, r := budgetReplica(t, snap, "-shutdown-delay", "1s")
	charge(t, r, "alice", 3)
	p.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	charge(t, r, "alice", 2) // during the delay: served, and kept
	if err := exited(t, p); err != nil {
		t.Fatalf("exit after SIGTERM: %v; output:\n%s", err, p.out)
	}
	if !strings.Contains(p.out.String(), "memory snapshot written at shutdown") {
		t.Fatalf("no snapshot at shutdown; output:\n%s", p.out)
	}

	_, r = budgetReplica(t, snap)
	if n := spend(t, r, "alice"); n != 0 {
		t.Errorf("after SIGTERM and a new start, alice's spent budget admitted %d more", n)
	}
	if n := spend(t, r, "bob"); n != 5 {
		t.Errorf("a fresh budget admitted %d, want 5", n)
	}
}

// TestSnapshotNotWrittenFailsTheExit: when the last snapshot cannot be
// written (its folder is gone), the charges since the last one are lost:
// the service says so and exits 1, not 0, so that whatever runs it sees.
func TestSnapshotNotWrittenFailsTheExit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, r := budgetReplica(t, filepath.Join(dir, "buckets.snap"))
	charge(t, r, "alice", 2)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := exited(t, p)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit after a snapshot that could not be written: %v, want exit status 1; output:\n%s", err, p.out)
	}
	if !strings.Contains(p.out.String(), "memory snapshot not written at shutdown") {
		t.Errorf("the log does not say the snapshot was not written; output:\n%s", p.out)
	}
}

// TestSnapshotSIGKILL: killed at once, the service has lost at most the
// charges of the last interval: those older than an interval are back.
func TestSnapshotSIGKILL(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	const interval = 200 * time.Millisecond
	p, r := budgetReplica(t, snap, "-memory-snapshot-interval", interval.String())
	charge(t, r, "alice", 3)
	time.Sleep(5 * interval) // a write at least, even on a loaded machine
	charge(t, r, "alice", 1) // may be lost
	p.cmd.Process.Signal(syscall.SIGKILL)
	exited(t, p)

	_, r = budgetReplica(t, snap, "-memory-snapshot-interval", interval.String())
	if n := spend(t, r, "alice"); n > 2 {
		t.Errorf("after SIGKILL, alice's budget admitted %d more: the 3 charges older than an interval were lost", n)
	}
}

// writtenSnapshot returns the bytes of a snapshot the binary wrote.
func writtenSnapshot(t *testing.T) []byte {
	t.Helper()
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	p, r := budgetReplica(t, snap)
	charge(t, r, "alice", 2)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := exited(t, p); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// badSnapshots are damaged snapshots and what the service says of each.
func badSnapshots(t *testing.T) map[string]struct {
	data []byte
	says string
} {
	good := writtenSnapshot(t)
	future := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(future[8:], 99)
	return map[string]struct {
		data []byte
		says string
	}{
		"truncated":      {good[:len(good)-5], "truncated"},
		"not a snapshot": {[]byte("{\"buckets\": []}\n"), "not a memory snapshot"},
		"other version":  {future, "unsupported format version (version 99, written by a newer envoy-rls; this build reads version 1)"},
	}
}

// TestSnapshotRefusesToStart: a snapshot that cannot be read stops the
// start, with a message naming the file and what is wrong.
func TestSnapshotRefusesToStart(t *testing.T) {
	for name, bad := range badSnapshots(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			snap := filepath.Join(dir, "buckets.snap")
			if err := os.WriteFile(snap, bad.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "budget.yaml"), []byte(budgetConfig), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, envoyRLS(t), "-config", filepath.Join(dir, "budget.yaml"), "-grpc-addr", "127.0.0.1:0",
				"-http-addr", "127.0.0.1:0", "-admin-addr", "", "-memory-snapshot", snap).CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("started on a bad snapshot (%v); output:\n%s", err, out)
			}
			if !strings.Contains(string(out), snap+": "+bad.says) || !strings.Contains(string(out), "-memory-snapshot-start-empty") {
				t.Errorf("output:\n%s\nwant the file, %q, and how to start anyway", out, bad.says)
			}
			if data, _ := os.ReadFile(snap); string(data) != string(bad.data) {
				t.Error("the bad snapshot changed")
			}
		})
	}
}

// TestSnapshotStartEmpty: asked to, the service starts empty on a bad
// snapshot, warns, moves the file aside, and writes a good one.
func TestSnapshotStartEmpty(t *testing.T) {
	bad := badSnapshots(t)["not a snapshot"]
	snap := filepath.Join(t.TempDir(), "buckets.snap")
	if err := os.WriteFile(snap, bad.data, 0o600); err != nil {
		t.Fatal(err)
	}
	p, r := budgetReplica(t, snap, "-memory-snapshot-start-empty")
	if out := p.out.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, snap+": not a memory snapshot") {
		t.Errorf("no warning naming the file; output:\n%s", out)
	}
	aside, _ := filepath.Glob(snap + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v, want one file", aside)
	}
	if data, _ := os.ReadFile(aside[0]); string(data) != string(bad.data) {
		t.Errorf("%s does not hold the bad snapshot", aside[0])
	}
	charge(t, r, "alice", 5)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := exited(t, p); err != nil {
		t.Fatal(err)
	}
	_, r = budgetReplica(t, snap)
	if n := spend(t, r, "alice"); n != 0 {
		t.Errorf("the new snapshot lost alice's budget: %d admitted", n)
	}
}
