package memory

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// Limits of every algorithm, a calendar window among them.
var (
	leakyLimit    = limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	slidingLimit  = limit.Limit{Algorithm: limit.SlidingWindow, Size: 10, Window: time.Hour, Resolution: 6 * time.Minute}
	fixedLimit    = limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Window: time.Hour}
	calendarLimit = limit.Limit{Algorithm: limit.FixedWindow, Size: 2_000_000, Calendar: window.Month, Zone: "Europe/Berlin"}
)

// snapStore returns a store that keeps its snapshot at path, its clock at
// *now, closed at the test's end.
func snapStore(t *testing.T, path string, now *time.Time, o SnapshotOptions) (*Store, error) {
	t.Helper()
	o.Path = path
	if o.Interval == 0 {
		o.Interval = time.Hour // written by the test, or at Close
	}
	s, err := New(Options{SweepInterval: -1, Clock: func() time.Time { return *now }, Snapshot: o})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func mustSnapStore(t *testing.T, path string, now *time.Time) *Store {
	t.Helper()
	s, err := snapStore(t, path, now, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func apply(t *testing.T, s *Store, now time.Time, buckets ...limit.Bucket) []limit.Result {
	t.Helper()
	r := make([]limit.Result, len(buckets))
	if err := s.Apply(context.Background(), now, buckets, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func states(t *testing.T, s *Store, now time.Time, buckets []limit.Bucket) []limit.State {
	t.Helper()
	st := make([]limit.State, len(buckets))
	if _, err := s.State(context.Background(), now, buckets, st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSnapshotRoundTrip: every algorithm's state, odd keys and a debt past
// the limit come back as they were, with their limits.
func TestSnapshotRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	buckets := []limit.Bucket{
		{Key: "api|user=alice", Limit: leakyLimit, Hits: 3},
		{Key: "api|user=alice|#sw1h/6m", Limit: slidingLimit, Hits: 4},
		{Key: "api|user=alice|#fw1h", Limit: fixedLimit, Hits: 5},
		{Key: "api|user=alice|#cal", Limit: calendarLimit, Hits: 1_500_000},
		{Key: "tokens|user=bob", Limit: leakyLimit, Hits: 25, Always: true}, // past its limit
		{Key: "odd|k=\x00\xff|=%7C", Limit: leakyLimit, Hits: 1},
	}
	for _, b := range buckets {
		apply(t, s, now, b)
	}
	now = now.Add(7 * time.Minute) // the sliding window's charge moves to its second sub-window
	apply(t, s, now, buckets[1])
	want := states(t, s, now, buckets)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	back := mustSnapStore(t, path, &now)
	if back.Len() != len(buckets) {
		t.Fatalf("%d buckets read back, want %d", back.Len(), len(buckets))
	}
	got := states(t, back, now, buckets)
	for i := range buckets {
		if got[i].Counter != want[i].Counter || got[i].Timestamp != want[i].Timestamp || !slices.Equal(got[i].Counts, want[i].Counts) {
			t.Errorf("%s: read back %+v, want %+v", buckets[i].Key, got[i], want[i])
		}
	}
	if want[1].Counts == nil || want[4].Counter <= leakyLimit.Size {
		t.Fatalf("the test lost its point: sliding counts %v, debt %d", want[1].Counts, want[4].Counter)
	}
	// Their limits too: matched with the same limits, all stay, unchanged.
	limits := map[string]limit.Limit{}
	for _, b := range buckets {
		limits[b.Key] = b.Limit
	}
	r := back.Reconcile(func(key string) (*limit.Limit, bool) { l := limits[key]; return &l, true })
	if r != (Reconciled{Kept: len(buckets)}) {
		t.Errorf("reconciled with their own limits: %+v", r)
	}
	// And they decide on: 5 more fit the fixed window's 10, not 6.
	res := apply(t, back, now, limit.Bucket{Key: buckets[2].Key, Limit: fixedLimit, Hits: 6})
	if res[0].Admitted || res[0].State.Counter != 5 {
		t.Errorf("the fixed window after the restart: %+v, want rejected at a count of 5", res[0])
	}
}

// TestSnapshotSkipsExpired: a bucket that drained while the service was
// down does not come back.
func TestSnapshotSkipsExpired(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	apply(t, s, now, limit.Bucket{Key: "short", Limit: limit.Limit{Size: 10, DripRate: time.Second, DripSize: 1}, Hits: 1},
		limit.Bucket{Key: "long", Limit: leakyLimit, Hits: 1})
	s.Close()
	now = now.Add(10 * time.Second)
	back := mustSnapStore(t, path, &now)
	if back.Len() != 1 {
		t.Fatalf("%d buckets read back, want only the one not drained", back.Len())
	}
}

// TestSnapshotPeriodic: the writer writes every interval without Close,
// so a crash loses at most an interval's charges.
func TestSnapshotPeriodic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s, err := snapStore(t, path, &now, SnapshotOptions{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := limit.Bucket{Key: "api|user=alice", Limit: fixedLimit, Hits: 4}
	apply(t, s, now, b)
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Read as a restart after a crash would, from a copy taken while
		// the store runs, as a backup would be.
		data, _ := os.ReadFile(path)
		cp := filepath.Join(t.TempDir(), "copy.snap")
		if err := os.WriteFile(cp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if back, err := snapStore(t, cp, &now, SnapshotOptions{}); err == nil && back.Len() == 1 {
			if st := states(t, back, now, []limit.Bucket{b}); st[0].Counter != 4 {
				t.Fatalf("read back %+v, want a count of 4", st[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot holding the charge within 5s of an interval of 20ms")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSnapshotAtomicWrite: a write that fails before its rename, as a
// crash there would, leaves the previous snapshot whole, and a leftover
// temporary file is no harm.
func TestSnapshotAtomicWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	b := limit.Bucket{Key: "api|user=alice", Limit: fixedLimit, Hits: 1}
	apply(t, s, now, b)
	if _, err := s.WriteSnapshot(); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	rename = func(string, string) error { return errors.New("crashed before the rename") }
	defer func() { rename = os.Rename }()
	apply(t, s, now, b)
	if _, err := s.WriteSnapshot(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a failed write: %v, want an error naming %s", err, path)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, first) {
		t.Fatal("the snapshot changed although its write failed before the rename")
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file stayed: %v", err)
	}
	rename = os.Rename

	// A crash leaves a half-written temporary file: the snapshot is read.
	if err := os.WriteFile(path+".tmp", first[:len(first)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	back := mustSnapStore(t, path, &now)
	if st := states(t, back, now, []limit.Bucket{b}); st[0].Counter != 1 {
		t.Fatalf("after a crash mid-write: %+v, want the previous snapshot's count of 1", st[0])
	}
}

// TestSnapshotClosedStore: once Close has begun, nothing changes the
// buckets, so the last snapshot holds every charge.
func TestSnapshotClosedStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	b := limit.Bucket{Key: "api|user=alice", Limit: fixedLimit, Hits: 1}
	apply(t, s, now, b)
	s.Close()
	if err := s.Apply(context.Background(), now, []limit.Bucket{b}, make([]limit.Result, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v", err)
	}
	if err := s.Reset(context.Background(), []string{b.Key}); !errors.Is(err, ErrClosed) {
		t.Errorf("Reset after Close: %v", err)
	}
	if _, err := s.WriteSnapshot(); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteSnapshot after Close: %v", err)
	}
	if back := mustSnapStore(t, path, &now); back.Len() != 1 {
		t.Errorf("%d buckets after Close, want 1", back.Len())
	}
}

// TestSnapshotBounds: a snapshot larger than the store's bounds (lowered
// since) fills it to them, evicting, and no further.
func TestSnapshotBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	fill(t, s, 1000, keysOf(20))
	s.Close()
	small, err := New(Options{MaxBuckets: 100, Shards: 4, SweepInterval: -1, Clock: func() time.Time { return now }, Snapshot: SnapshotOptions{Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if small.Len() > 100 || small.Len() < 50 || small.Evictions() == 0 {
		t.Errorf("%d buckets, %d evictions in a store of 100", small.Len(), small.Evictions())
	}
}

// TestSnapshotDirectoryNotWritable: a snapshot that could never be
// written is an error at start, naming the file.
func TestSnapshotDirectoryNotWritable(t *testing.T) {
	now := t0
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir", "buckets.snap")
	if _, err := snapStore(t, missing, &now, SnapshotOptions{}); err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("a missing directory: %v", err)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Create(filepath.Join(ro, "probe")); err == nil {
		f.Close() // root writes anyway
		t.Log("running with privileges that write into a read-only directory: that case is skipped")
	} else if _, err := snapStore(t, filepath.Join(ro, "buckets.snap"), &now, SnapshotOptions{}); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("a read-only directory: %v", err)
	}

	// Writable at start, gone later: the write fails, naming the file, and
	// Close says the last one failed.
	gone := filepath.Join(dir, "gone")
	os.Mkdir(gone, 0o700)
	s := mustSnapStore(t, filepath.Join(gone, "buckets.snap"), &now)
	os.RemoveAll(gone)
	if _, err := s.WriteSnapshot(); err == nil || !strings.Contains(err.Error(), filepath.Join(gone, "buckets.snap")) {
		t.Errorf("a write into a removed directory: %v", err)
	}
	if err := s.Close(); err == nil {
		t.Error("Close wrote its last snapshot into a removed directory")
	}
}

// TestSnapshotLogs: reading and the last write are logged.
func TestSnapshotLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s, err := snapStore(t, path, &now, SnapshotOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, now, limit.Bucket{Key: "k", Limit: leakyLimit, Hits: 1})
	s.Close()
	if _, err := snapStore(t, path, &now, SnapshotOptions{Logger: log}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no memory snapshot yet", "memory snapshot written at shutdown", "memory snapshot read", "buckets=1"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, &buf)
		}
	}
}

// TestSnapshotSkipsUnchanged: a store whose buckets did not change since
// its last write (or since it read the file) writes nothing again, but
// after a failed write it does.
func TestSnapshotSkipsUnchanged(t *testing.T) {
	if size := unsafe.Sizeof(shard{}); size != 128 {
		t.Errorf("a shard takes %d bytes, want 128: two cache lines", size)
	}
	path := filepath.Join(t.TempDir(), "buckets.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	if s.unchanged() {
		t.Fatal("no file yet, and unchanged")
	}
	b := limit.Bucket{Key: "api|user=alice", Limit: fixedLimit, Hits: 1}
	apply(t, s, now, b)
	if _, err := s.WriteSnapshot(); err != nil || !s.unchanged() {
		t.Fatalf("after a write: %v, unchanged %v", err, s.unchanged())
	}
	apply(t, s, now, b)
	if s.unchanged() {
		t.Fatal("a charge since the write, and unchanged")
	}
	rename = func(string, string) error { return errors.New("crashed before the rename") }
	s.WriteSnapshot()
	rename = os.Rename
	if s.unchanged() {
		t.Fatal("the last write failed, and unchanged")
	}
	s.Close()

	back := mustSnapStore(t, path, &now)
	if !back.unchanged() {
		t.Error("just read, and changed")
	}
	back.Reset(context.Background(), []string{b.Key})
	if back.unchanged() {
		t.Error("a bucket reset, and unchanged")
	}
}
