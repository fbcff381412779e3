package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// goodSnapshot returns the bytes of a snapshot of a few buckets.
func goodSnapshot(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "good.snap")
	now := t0
	s := mustSnapStore(t, path, &now)
	for i, l := range []limit.Limit{leakyLimit, slidingLimit, fixedLimit, calendarLimit} {
		apply(t, s, now, limit.Bucket{Key: "api|user=" + string(rune('a'+i)), Limit: l, Hits: 2})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// reseal gives a snapshot whose records were changed a header that fits
// them again: their length and checksum.
func reseal(data []byte) []byte {
	body := data[headerLen:]
	binary.BigEndian.PutUint32(data[12:], crc32.Checksum(body, castagnoli))
	binary.BigEndian.PutUint64(data[16:], uint64(len(body)))
	return data
}

// damages are the ways a snapshot cannot be read, and the error each is.
func damages(good []byte) []struct {
	name string
	data []byte
	kind error
	says string
} {
	clone := func() []byte { return bytes.Clone(good) }
	flipped := clone()
	flipped[len(flipped)/2] ^= 0x10
	future := clone()
	binary.BigEndian.PutUint32(future[8:], SnapshotVersion+1)
	unknown := append(clone()[:headerLen], 2, 'Z', 0)
	return []struct {
		name string
		data []byte
		kind error
		says string
	}{
		{"empty", nil, ErrSnapshotTruncated, "0 bytes"},
		{"cut in the magic", good[:4], ErrSnapshotTruncated, "shorter than the header"},
		{"cut in the header", good[:20], ErrSnapshotTruncated, "shorter than the header"},
		{"cut in the records", good[:len(good)-3], ErrSnapshotTruncated, "its header announces"},
		{"not a snapshot", []byte("user=alice 5\nuser=bob 7\n"), ErrNotSnapshot, `starts with "user=ali"`},
		{"a future version", future, ErrSnapshotVersion, "version 2, written by a newer envoy-rls; this build reads version 1"},
		{"a flipped byte", flipped, ErrSnapshotChecksum, "damaged"},
		{"bytes after the end", append(clone(), 0, 0), ErrSnapshotMalformed, "2 bytes after"},
		{"an unknown record, checksummed", reseal(unknown), ErrSnapshotMalformed, "record 0"},
	}
}

// TestSnapshotDamage: each kind of damage stops the start with an error
// naming the file and what is wrong, and leaves the file where it is.
func TestSnapshotDamage(t *testing.T) {
	for _, d := range damages(goodSnapshot(t)) {
		t.Run(d.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "buckets.snap")
			if err := os.WriteFile(path, d.data, 0o600); err != nil {
				t.Fatal(err)
			}
			now := t0
			_, err := snapStore(t, path, &now, SnapshotOptions{})
			var se *SnapshotError
			if !errors.As(err, &se) || !errors.Is(err, d.kind) {
				t.Fatalf("error %v, want a SnapshotError of %v", err, d.kind)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, d.kind.Error()) || !strings.Contains(msg, d.says) {
				t.Errorf("error %q: want the file, %q and %q", msg, d.kind, d.says)
			}
			if data, _ := os.ReadFile(path); !bytes.Equal(data, d.data) {
				t.Error("the damaged file changed")
			}
		})
	}
}

// TestSnapshotStartEmpty: asked to, the store starts empty on a damaged
// snapshot, warns naming the file and what is wrong, and moves the file
// aside, never over an earlier one.
func TestSnapshotStartEmpty(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "buckets.snap")
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for i, d := range damages(goodSnapshot(t))[:3] {
		if err := os.WriteFile(path, d.data, 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		s, err := snapStore(t, path, &now, SnapshotOptions{StartEmpty: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		if s.Len() != 0 {
			t.Errorf("%s: %d buckets, want an empty store", d.name, s.Len())
		}
		aside := path + ".corrupt-20260304T050607Z"
		if i > 0 {
			aside += "-" + string(rune('1'+i))
		}
		if data, err := os.ReadFile(aside); err != nil || !bytes.Equal(data, d.data) {
			t.Errorf("%s: %s: %v, want the damaged file moved there", d.name, aside, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: the damaged file is still at %s", d.name, path)
		}
		if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, path) || !strings.Contains(l, d.kind.Error()) {
			t.Errorf("%s: log %q: want a warning naming the file and the damage", d.name, l)
		}
		// The next write makes a new snapshot.
		if _, err := s.WriteSnapshot(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		os.Remove(path)
	}
}

// TestSnapshotMissing: no file at the first start is no error.
func TestSnapshotMissing(t *testing.T) {
	now := t0
	s, err := snapStore(t, filepath.Join(t.TempDir(), "buckets.snap"), &now, SnapshotOptions{})
	if err != nil || s.Len() != 0 {
		t.Fatalf("%v, %d buckets", err, s.Len())
	}
}

// TestDecodeNeverPanics: whatever a sealed file holds, reading it fails
// cleanly or reads buckets.
func TestDecodeNeverPanics(t *testing.T) {
	good := goodSnapshot(t)
	for i := headerLen; i < len(good); i++ {
		for _, b := range []byte{0, 0x7f, 0x80, 0xff} {
			data := bytes.Clone(good)
			data[i] = b
			s, err := New(Options{SweepInterval: -1, Clock: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			s.load("x", reseal(data), t0)
			s.Close()
		}
	}
}
