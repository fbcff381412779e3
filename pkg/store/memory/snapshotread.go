package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// What makes a snapshot unreadable; a SnapshotError wraps one of them, or
// the error reading the file.
var (
	ErrNotSnapshot       = errors.New("not a memory snapshot")
	ErrSnapshotVersion   = errors.New("unsupported format version")
	ErrSnapshotTruncated = errors.New("truncated")
	ErrSnapshotChecksum  = errors.New("checksum mismatch")
	ErrSnapshotMalformed = errors.New("malformed")
)

// SnapshotError is a snapshot file that cannot be read.
type SnapshotError struct {
	Path string
	// Err is one of the ErrNotSnapshot, ErrSnapshot... errors, or the
	// error reading the file.
	Err error
	// Detail says more, such as the bytes the file holds and the bytes it
	// should.
	Detail string
}

func (e *SnapshotError) Error() string {
	msg := "memory snapshot " + e.Path + ": " + e.Err.Error()
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

func (e *SnapshotError) Unwrap() error { return e.Err }

// maxCounts bounds the counts of one sliding window read from a file:
// far more sub-windows than a limit may have, to catch a bad length.
const maxCounts = 1 << 20

// readSnapshot fills the store from o.Path; a missing file leaves it
// empty. With o.StartEmpty, a file that cannot be read is moved aside.
func (s *Store) readSnapshot(o SnapshotOptions) error {
	start := time.Now()
	now := s.clock()
	data, err := os.ReadFile(o.Path)
	if errors.Is(err, fs.ErrNotExist) {
		o.Logger.Info("no memory snapshot yet: the store starts empty", "path", o.Path)
		return nil
	}
	var st loadStats
	if err != nil {
		err = &SnapshotError{Path: o.Path, Err: err}
	} else if st, err = s.load(o.Path, data, now); err == nil {
		s.snapOK.Store(true) // until a bucket changes
		o.Logger.Info("memory snapshot read", "path", o.Path, "buckets", st.kept, "expired", st.expired, "evicted", st.evicted,
			"written", time.UnixMicro(st.written).UTC().Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	if !o.StartEmpty {
		return err
	}
	aside, merr := moveAside(o.Path, now)
	if merr != nil {
		return fmt.Errorf("%w; starting empty, it could not be moved aside: %v", err, merr)
	}
	o.Logger.Warn("memory snapshot unreadable: the store starts empty, as asked, and the file is moved aside", "path", o.Path, "moved_to", aside, "err", err)
	return nil
}

// moveAside renames a snapshot that cannot be read to path.corrupt-<time>,
// never over another.
func moveAside(path string, now time.Time) (string, error) {
	base := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	aside := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		aside = base + "-" + strconv.Itoa(i)
	}
	return aside, os.Rename(path, aside)
}

type loadStats struct {
	written                int64
	kept, expired, evicted int
}

// load checks a whole snapshot, then adds its buckets that have not
// expired at now, so that a bad file adds none.
func (s *Store) load(path string, data []byte, now time.Time) (loadStats, error) {
	fail := func(kind error, format string, args ...any) (loadStats, error) {
		return loadStats{}, &SnapshotError{Path: path, Err: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if len(data) < len(snapshotMagic) || string(data[:len(snapshotMagic)]) != snapshotMagic {
		if bytes.HasPrefix([]byte(snapshotMagic), data) {
			return fail(ErrSnapshotTruncated, "%d bytes, shorter than the header", len(data))
		}
		return fail(ErrNotSnapshot, "it starts with %q, not %q", data[:min(len(data), len(snapshotMagic))], snapshotMagic)
	}
	if len(data) < headerLen {
		return fail(ErrSnapshotTruncated, "%d bytes, shorter than the header", len(data))
	}
	if v := binary.BigEndian.Uint32(data[8:]); v != SnapshotVersion {
		by := ""
		if v > SnapshotVersion {
			by = ", written by a newer envoy-rls"
		}
		return fail(ErrSnapshotVersion, "version %d%s; this build reads version %d", v, by, SnapshotVersion)
	}
	sum, n := binary.BigEndian.Uint32(data[12:]), binary.BigEndian.Uint64(data[16:])
	body := data[headerLen:]
	switch {
	case uint64(len(body)) < n:
		return fail(ErrSnapshotTruncated, "%d bytes of records of the %d its header announces", len(body), n)
	case uint64(len(body)) > n:
		return fail(ErrSnapshotMalformed, "%d bytes after the %d of records its header announces", uint64(len(body))-n, n)
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return fail(ErrSnapshotChecksum, "the records' CRC-32C is %08x, the header says %08x: the file is damaged", got, sum)
	}
	var st loadStats
	var err error
	var count int
	if st.written, count, err = decode(body, nil); err != nil {
		return fail(ErrSnapshotMalformed, "%v", err)
	}
	// Maps of their size at once, rather than grown bucket by bucket.
	hint := min(count/len(s.shards)*9/8+8, s.perShard)
	for i := range s.shards {
		if len(s.shards[i].m) == 0 {
			s.shards[i].m = make(map[string]entry, hint)
		}
	}
	us := now.UnixMicro()
	before := s.evictions.Load()
	_, _, err = decode(body, func(key []byte, l *limit.Limit, e entry, counts []int64) {
		if e.expires <= us {
			st.expired++
			return
		}
		k := string(key)
		sh := &s.shards[maphash.String(s.seed, k)&s.mask]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if l != nil {
			e.limit = sh.limitID(*l)
		}
		sh.delete(k)
		s.add(sh, k, e, counts, us, nil, func(k string) string { return k })
	})
	if err != nil {
		return loadStats{}, err // checked above
	}
	st.evicted = int(s.evictions.Load() - before)
	st.kept = s.Len()
	return st, nil
}

// decode reads the records of a snapshot, giving each bucket to visit
// (nil: only checks them), and returns the time the snapshot was written
// and its number of buckets.
func decode(body []byte, visit func(key []byte, l *limit.Limit, e entry, counts []int64)) (written int64, n int, err error) {
	var (
		limits  []limit.Limit
		buckets uint64
		ended   bool
	)
	for i := 0; len(body) > 0; i++ {
		n, w := binary.Uvarint(body)
		if w <= 0 || n == 0 || n > uint64(len(body)-w) {
			return 0, 0, fmt.Errorf("record %d: a bad length", i)
		}
		r := reader{b: body[w : w+int(n)]}
		body = body[w+int(n):]
		kind := r.byte()
		switch {
		case ended:
			return 0, 0, fmt.Errorf("record %d: after the end", i)
		case (i == 0) != (kind == recordTime):
			return 0, 0, fmt.Errorf("record %d: the time written must come first, and only there", i)
		}
		switch kind {
		case recordTime:
			written = r.varint()
		case recordLimit:
			l := limit.Limit{Algorithm: limit.Algorithm(r.uvarint()), Size: r.varint(), DripRate: time.Duration(r.varint()),
				DripSize: r.varint(), Window: time.Duration(r.varint()), Resolution: time.Duration(r.varint()),
				Calendar: window.Calendar(r.uvarint())}
			l.Zone = string(r.bytes(r.uvarint()))
			limits = append(limits, l)
		case recordBucket:
			key := r.bytes(r.uvarint())
			id := r.uvarint()
			e := entry{counter: r.varint(), timestamp: r.varint(), expires: r.varint()}
			nc := r.uvarint()
			if nc > maxCounts || nc > uint64(len(r.b)) {
				return 0, 0, fmt.Errorf("record %d: %d counts", i, nc)
			}
			var counts []int64
			if nc > 0 && visit != nil {
				counts = make([]int64, nc)
			}
			for j := range nc {
				if v := r.varint(); counts != nil {
					counts[j] = v
				}
			}
			if id > uint64(len(limits)) {
				return 0, 0, fmt.Errorf("record %d: limit %d of %d defined", i, id, len(limits))
			}
			buckets++
			if visit != nil && r.err == nil {
				var l *limit.Limit
				if id > 0 {
					l = &limits[id-1]
				}
				visit(key, l, e, counts)
			}
		case recordEnd:
			if nb, nl := r.uvarint(), r.uvarint(); r.err == nil && (nb != buckets || nl != uint64(len(limits))) {
				return 0, 0, fmt.Errorf("record %d: the end counts %d buckets and %d limits, the file holds %d and %d", i, nb, nl, buckets, len(limits))
			}
			ended = true
		default:
			return 0, 0, fmt.Errorf("record %d: unknown kind %q", i, kind)
		}
		if r.err == nil && len(r.b) > 0 {
			r.err = fmt.Errorf("%d bytes left over", len(r.b))
		}
		if r.err != nil {
			return 0, 0, fmt.Errorf("record %d (%q): %v", i, kind, r.err)
		}
	}
	if !ended {
		return 0, 0, errors.New("no end record")
	}
	return written, int(buckets), nil
}

// reader reads the fields of one record; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = errors.New("empty")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errors.New("cut short")
	}
	r.b = nil
}
