package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// SnapshotOptions keep a store's buckets in a file, so that a restart
// keeps their counts: the store reads the file in New, writes it every
// Interval and once more in Close, after the last call.
//
// A write never replaces the file in part: it writes Path.tmp beside it,
// syncs it, renames it over Path and syncs the directory, so that a crash
// at any moment leaves the previous snapshot or the new one. A write copies
// one shard at a time under its lock, and encodes and writes with no lock
// held, so that calls wait at most for one shard's copy.
//
// The format (version 1): a 24-byte header, then records.
//
//	magic "ERLSSNAP" | version uint32 | CRC-32C of the records uint32 | length of the records uint64
//
// (big-endian), then records, each its length (uvarint) and its bytes: a
// kind byte, then varints. 'T' is the time written (Unix microseconds),
// first; 'L' defines the next limit (from 1: algorithm, size, drip rate,
// drip size, window, resolution, durations in nanoseconds; calendar, and
// time zone's length and name); 'B' is a
// bucket (key length and key, its limit's number or 0 if not known,
// counter, timestamp, expiry in Unix microseconds, sliding-window counts
// and each count); 'E' ends the file with the number of buckets and of
// limits.
type SnapshotOptions struct {
	// Path is the file; "" keeps no snapshot. Its directory must be
	// writable: New fails otherwise.
	Path string
	// Interval is the time between two writes; 0 means 10s. A crash loses
	// the charges of at most one interval.
	Interval time.Duration
	// StartEmpty makes New start an empty store when Path cannot be read
	// (damaged, of another format version, not a snapshot), moving the
	// file aside to Path.corrupt-<time>, rather than fail.
	StartEmpty bool
	// Logger hears of reads and writes and of their failures; nil logs
	// nothing.
	Logger *slog.Logger
}

// DefaultSnapshotInterval is the time between two snapshots unless
// SnapshotOptions say otherwise.
const DefaultSnapshotInterval = 10 * time.Second

// SnapshotVersion is the format version this package writes and reads.
const SnapshotVersion = 1

const (
	snapshotMagic  = "ERLSSNAP"
	headerLen      = 24
	recordTime     = 'T'
	recordLimit    = 'L'
	recordBucket   = 'B'
	recordEnd      = 'E'
	writeBufferLen = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rename moves the written file over the snapshot; tests make it fail,
// as a crash between the write and the rename would.
var rename = os.Rename

// SnapshotStats describe one snapshot written.
type SnapshotStats struct {
	Buckets int
	Bytes   int64
	Took    time.Duration
	// Held is the longest a shard was locked to copy its buckets: the
	// longest a call waited for the snapshot.
	Held time.Duration
}

// openSnapshot checks that o.Path's directory is writable, reads the
// snapshot and starts the periodic writer; nothing when o.Path is "".
func (s *Store) openSnapshot(o SnapshotOptions) error {
	if o.Path == "" {
		return nil
	}
	if o.Interval == 0 {
		o.Interval = DefaultSnapshotInterval
	}
	if o.Interval < 0 {
		return fmt.Errorf("memory snapshot %s: the interval must be positive, got %s", o.Path, o.Interval)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// Found now rather than at the first write, an interval after start.
	f, err := os.OpenFile(o.Path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("memory snapshot %s: its directory is not writable: %w", o.Path, err)
	}
	f.Close()
	os.Remove(o.Path + ".tmp")
	if err := s.readSnapshot(o); err != nil {
		return err
	}
	s.snapshot = o
	s.snapDone = make(chan struct{})
	go s.snapshotEvery()
	return nil
}

func (s *Store) snapshotEvery() {
	defer close(s.snapDone)
	t := time.NewTicker(s.snapshot.Interval)
	defer t.Stop()
	log := s.snapshot.Logger
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if s.unchanged() {
				log.Debug("memory snapshot unchanged: not written again", "path", s.snapshot.Path)
				continue
			}
			st, err := s.writeSnapshot()
			if err != nil {
				log.Error("memory snapshot not written; the next interval tries again", "err", err)
				continue
			}
			log.Debug("memory snapshot written", "path", s.snapshot.Path, "buckets", st.Buckets, "bytes", st.Bytes, "took", st.Took)
		}
	}
}

// unchanged reports whether the file holds the buckets as they are: no
// need to write it again.
func (s *Store) unchanged() bool {
	if !s.snapOK.Load() {
		return false
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		dirty := sh.dirty
		sh.mu.Unlock()
		if dirty {
			return false
		}
	}
	return true
}

// finalSnapshot writes the snapshot once the store is closed, unless the
// file holds it already.
func (s *Store) finalSnapshot() error {
	if s.unchanged() {
		s.snapshot.Logger.Info("memory snapshot unchanged since its last write: not written at shutdown", "path", s.snapshot.Path)
		return nil
	}
	st, err := s.writeSnapshot()
	if err != nil {
		s.snapshot.Logger.Error("memory snapshot not written at shutdown: the charges since the last one are lost", "err", err)
		return err
	}
	s.snapshot.Logger.Info("memory snapshot written at shutdown", "path", s.snapshot.Path, "buckets", st.Buckets, "bytes", st.Bytes, "took", st.Took)
	return nil
}

// ErrNoSnapshot is returned by WriteSnapshot for a store made without a
// snapshot path.
var ErrNoSnapshot = errors.New("memory store has no snapshot path")

// WriteSnapshot writes the snapshot now, as the periodic writer does
// (which skips a write when no bucket changed since the last).
func (s *Store) WriteSnapshot() (SnapshotStats, error) {
	if s.snapshot.Path == "" {
		return SnapshotStats{}, ErrNoSnapshot
	}
	if s.closed() {
		return SnapshotStats{}, ErrClosed // Close wrote the last one
	}
	return s.writeSnapshot()
}

// writeSnapshot writes the buckets to Path.tmp, syncs it and renames it
// over Path, then syncs the directory, so that the rename is durable too.
func (s *Store) writeSnapshot() (_ SnapshotStats, err error) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	// The shards' marks are cleared as they are copied: until this write
	// succeeds, the next must not be skipped.
	s.snapOK.Store(false)
	defer func() { s.snapOK.Store(err == nil) }()
	start := time.Now()
	path := s.snapshot.Path
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return SnapshotStats{}, fmt.Errorf("memory snapshot %s: %w", path, err)
	}
	w := &snapshotWriter{f: f, buf: make([]byte, 0, writeBufferLen)}
	_, w.err = f.Write(make([]byte, headerLen)) // filled in at the end
	n, held := s.encode(w, s.clock())
	err = w.finish()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return SnapshotStats{}, fmt.Errorf("memory snapshot %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return SnapshotStats{}, fmt.Errorf("memory snapshot %s: written, but its directory not synced: %w", path, err)
	}
	return SnapshotStats{Buckets: n, Bytes: headerLen + w.n, Took: time.Since(start), Held: held}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// copied is a bucket copied out of its shard: counts[off:off+n] of the
// copy's counts are a sliding window's.
type copied struct {
	key    string
	e      entry
	off, n int
}

// encode writes every live bucket at now, one shard at a time: each is
// copied under its lock, then encoded with no lock held. It returns the
// number of buckets written and the longest a shard was locked.
func (s *Store) encode(w *snapshotWriter, now time.Time) (written int, held time.Duration) {
	us := now.UnixMicro()
	w.begin(recordTime)
	w.varint(us)
	w.end()
	fileIDs := map[limit.Limit]uint64{} // the file's limit numbers
	var (
		// Room for a shard and some, so that no copy grows it under a lock.
		items  = make([]copied, 0, s.Len()/len(s.shards)*5/4+64)
		counts []int64
		limits []limit.Limit
	)
	for i := range s.shards {
		sh := &s.shards[i]
		items, counts = items[:0], counts[:0]
		// A fresh time slice, so that the scheduler seldom preempts the
		// copy while it holds the lock (it does after 10ms of running).
		runtime.Gosched()
		sh.mu.Lock()
		locked := time.Now()
		sh.dirty = false
		limits = append(limits[:0], sh.limits...)
		for k, e := range sh.m {
			if e.expires <= us {
				continue
			}
			c := copied{key: k, e: e}
			if e.limit == 0 || limits[e.limit-1].Algorithm == limit.SlidingWindow {
				// Changed in place by charges: copied now.
				cs := sh.counts[k]
				c.off, c.n = len(counts), len(cs)
				counts = append(counts, cs...)
			}
			items = append(items, c)
		}
		sh.mu.Unlock()
		held = max(held, time.Since(locked))

		ids := make([]uint64, len(limits)) // the shard's limits' numbers in the file; 0 until written
		for _, c := range items {
			var id uint64
			if c.e.limit != 0 {
				if id = ids[c.e.limit-1]; id == 0 {
					id = w.limit(fileIDs, limits[c.e.limit-1])
					ids[c.e.limit-1] = id
				}
			}
			w.bucket(c, id, counts[c.off:c.off+c.n])
		}
		written += len(items)
	}
	w.begin(recordEnd)
	w.uvarint(uint64(written))
	w.uvarint(uint64(len(fileIDs)))
	w.end()
	return written, held
}

// snapshotWriter encodes records into a buffer, flushed to the file as
// it fills, and checksums what it flushes.
type snapshotWriter struct {
	f   *os.File
	buf []byte
	rec []byte // the record being encoded
	crc uint32
	n   int64 // bytes of records flushed
	err error
}

func (w *snapshotWriter) begin(kind byte) { w.rec = append(w.rec[:0], kind) }

func (w *snapshotWriter) varint(v int64)   { w.rec = binary.AppendVarint(w.rec, v) }
func (w *snapshotWriter) uvarint(v uint64) { w.rec = binary.AppendUvarint(w.rec, v) }

func (w *snapshotWriter) end() {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(w.rec)))
	w.buf = append(w.buf, w.rec...)
	if len(w.buf) >= writeBufferLen-4096 {
		w.flush()
	}
}

// limit returns l's number in the file, defining it if new.
func (w *snapshotWriter) limit(ids map[limit.Limit]uint64, l limit.Limit) uint64 {
	if id, ok := ids[l]; ok {
		return id
	}
	w.begin(recordLimit)
	w.uvarint(uint64(l.Algorithm))
	w.varint(l.Size)
	w.varint(int64(l.DripRate))
	w.varint(l.DripSize)
	w.varint(int64(l.Window))
	w.varint(int64(l.Resolution))
	w.uvarint(uint64(l.Calendar))
	w.uvarint(uint64(len(l.Zone)))
	w.rec = append(w.rec, l.Zone...)
	w.end()
	ids[l] = uint64(len(ids) + 1)
	return ids[l]
}

func (w *snapshotWriter) bucket(c copied, limitID uint64, counts []int64) {
	w.begin(recordBucket)
	w.uvarint(uint64(len(c.key)))
	w.rec = append(w.rec, c.key...)
	w.uvarint(limitID)
	w.varint(c.e.counter)
	w.varint(c.e.timestamp)
	w.varint(c.e.expires)
	w.uvarint(uint64(len(counts)))
	for _, v := range counts {
		w.varint(v)
	}
	w.end()
}

func (w *snapshotWriter) flush() {
	if w.err == nil && len(w.buf) > 0 {
		w.crc = crc32.Update(w.crc, castagnoli, w.buf)
		w.n += int64(len(w.buf))
		_, w.err = w.f.Write(w.buf)
	}
	w.buf = w.buf[:0]
}

// finish flushes the records and writes the header before them.
func (w *snapshotWriter) finish() error {
	w.flush()
	if w.err != nil {
		return w.err
	}
	h := make([]byte, 0, headerLen)
	h = append(h, snapshotMagic...)
	h = binary.BigEndian.AppendUint32(h, SnapshotVersion)
	h = binary.BigEndian.AppendUint32(h, w.crc)
	h = binary.BigEndian.AppendUint64(h, uint64(w.n))
	_, err := w.f.WriteAt(h, 0)
	return err
}
