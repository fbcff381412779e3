package region

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"math"
	"slices"
)

// KeyHash is what reports name a bucket by: the 64-bit FNV-1a hash of its
// key. Two keys of one hash would count as one bucket, once in 2^64
// pairs.
func KeyHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// reportVersion starts an encoded report, so that one of another form is
// never misread. Version 1 had no late regions; it is still read.
const reportVersion = 2

// maxLate bounds the late regions a report names.
const maxLate = 255

// recordBytes is an encoded record's size: its key's hash, demand,
// usage, size and rate, 8 bytes each.
const recordBytes = 40

// MaxReportBuckets bounds the buckets a report may name: what a replica
// publishes (the buckets it used in an interval) and what it reads of
// another (nothing in a report is trusted).
const MaxReportBuckets = 1 << 20

// AppendReport appends r's epoch, late regions and records, encoded, to
// b: the version, the epoch (8 bytes), the late regions' count (1 byte)
// and hashes (8 bytes each; version 1 has none, and is written when there
// are none), then each record, big-endian (region and replica
// are the field it is published under). The records an Exchange makes go
// in the order of their keys, which its readers take without a map.
func AppendReport(b []byte, r Report) []byte {
	late := r.Late[:min(len(r.Late), maxLate)]
	b = slices.Grow(b, 10+8*len(late)+recordBytes*r.len())
	if len(late) == 0 {
		// Version 1, which replicas of the version before read: while
		// every region hears every other, as through an upgrade.
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Epoch))
	} else {
		b = append(b, reportVersion)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Epoch))
		b = append(b, byte(len(late)))
		for _, h := range late {
			b = binary.BigEndian.AppendUint64(b, h)
		}
	}
	for key, rec := range r.all() {
		b = binary.BigEndian.AppendUint64(b, key)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(rec.Demand))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(rec.Usage))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(rec.Size))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(rec.Rate))
	}
	return b
}

// keyed is a record and its bucket's key hash.
type keyed struct {
	key uint64
	Record
}

// all yields r's records: its list's, or its Buckets'.
func (r *Report) all() iter.Seq2[uint64, Record] {
	return func(yield func(uint64, Record) bool) {
		if r.list == nil {
			for key, rec := range r.Buckets {
				if !yield(key, rec) {
					return
				}
			}
			return
		}
		for _, k := range r.list {
			if !yield(k.key, k.Record) {
				return
			}
		}
	}
}

// len is how many records r has.
func (r *Report) len() int {
	if r.list == nil {
		return len(r.Buckets)
	}
	return len(r.list)
}

// lookup returns r's record of key.
func (r *Report) lookup(key uint64) (Record, bool) {
	if r.list == nil {
		rec, ok := r.Buckets[key]
		return rec, ok
	}
	i, ok := slices.BinarySearchFunc(r.list, key, func(k keyed, key uint64) int { return cmp.Compare(k.key, key) })
	if !ok {
		return Record{}, false
	}
	return r.list[i].Record, true
}

// errReport is an encoded report that cannot be read.
var errReport = errors.New("not a report of this version")

// ParseReport reads a report of region's replica encoded by
// AppendReport. A report cut short, of another version or of more than
// MaxReportBuckets buckets is an error; a quantity that is not a number
// or is negative reads as none.
func ParseReport(region, replica string, b []byte) (Report, error) {
	r, err := parseReport(region, replica, b, nil)
	if err != nil {
		return Report{}, err
	}
	r.Buckets = make(map[uint64]Record, len(r.list))
	for _, k := range r.list {
		r.Buckets[k.key] = k.Record
	}
	r.list = nil
	return r, nil
}

// parseReport reads a report as ParseReport does, into a list (reusing
// list's room) instead of a map: one record a key, the last of a key
// encoded twice, in the order of their keys. A report encoded in that
// order, as Exchanges encode theirs, is read in one pass; another is
// sorted.
func parseReport[T string | []byte](region, replica string, b T, list []keyed) (Report, error) {
	epoch, late, body, err := reportHead(b)
	if err != nil {
		return Report{}, err
	}
	if len(body)%recordBytes != 0 {
		return Report{}, fmt.Errorf("%w: %d bytes of records, not a whole number of %d", errReport, len(body), recordBytes)
	}
	n := len(body) / recordBytes
	if n > MaxReportBuckets {
		return Report{}, fmt.Errorf("%w: %d buckets, more than %d", errReport, n, MaxReportBuckets)
	}
	list = slices.Grow(list[:0], n)[:n]
	f := func(p T) float64 { return want(math.Float64frombits(be64(p))) }
	ordered := true
	for i := range n {
		p := body[i*recordBytes : (i+1)*recordBytes]
		list[i] = keyed{key: be64(p), Record: Record{Demand: f(p[8:]), Usage: f(p[16:]), Bucket: Bucket{Size: f(p[24:]), Rate: f(p[32:])}}}
		if i > 0 && list[i-1].key >= list[i].key {
			ordered = false
		}
	}
	if !ordered {
		// In order, a key's records in the order encoded: the last stays.
		slices.SortStableFunc(list, func(a, b keyed) int { return cmp.Compare(a.key, b.key) })
		kept := list[:0]
		for i, k := range list {
			if i+1 < len(list) && list[i+1].key == k.key {
				continue
			}
			kept = append(kept, k)
		}
		list = kept
	}
	if list == nil {
		list = []keyed{}
	}
	return Report{Region: region, Replica: replica, Epoch: epoch, Late: late, list: list}, nil
}

// reportHead reads an encoded report's epoch and late regions, and
// returns its records' bytes.
func reportHead[T string | []byte](b T) (epoch int64, late []uint64, body T, err error) {
	if len(b) < 9 || b[0] != 1 && b[0] != reportVersion {
		return 0, nil, body, errReport
	}
	epoch, body = int64(be64(b[1:9])), b[9:]
	if b[0] == 1 {
		return epoch, nil, body, nil
	}
	if len(body) < 1 || len(body) < 1+8*int(body[0]) {
		return 0, nil, body, fmt.Errorf("%w: cut short in its late regions", errReport)
	}
	n := int(body[0])
	for i := range n {
		late = append(late, be64(body[1+8*i:]))
	}
	return epoch, late, body[1+8*n:], nil
}

// be64 reads the big-endian 64 bits at the start of p.
func be64[T string | []byte](p T) uint64 {
	_ = p[7]
	return uint64(p[0])<<56 | uint64(p[1])<<48 | uint64(p[2])<<40 | uint64(p[3])<<32 |
		uint64(p[4])<<24 | uint64(p[5])<<16 | uint64(p[6])<<8 | uint64(p[7])
}

// errNotInspectable is a wrapped store that cannot read or reset buckets.
var errNotInspectable = errors.New("this store cannot read or reset buckets")
