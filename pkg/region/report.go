package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
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
// never misread.
const reportVersion = 1

// recordBytes is an encoded record's size: its key's hash, demand,
// usage, size and rate, 8 bytes each.
const recordBytes = 40

// MaxReportBuckets bounds the buckets a report may name: what a replica
// publishes (the buckets it used in an interval) and what it reads of
// another (nothing in a report is trusted).
const MaxReportBuckets = 1 << 20

// AppendReport appends r's epoch and records, encoded, to b: the version,
// the epoch (8 bytes), then each record, big-endian (region and replica
// are the field it is published under).
func AppendReport(b []byte, r Report) []byte {
	b = append(b, reportVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Epoch))
	for key, rec := range r.Buckets {
		b = binary.BigEndian.AppendUint64(b, key)
		for _, f := range []float64{rec.Demand, rec.Usage, rec.Size, rec.Rate} {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
		}
	}
	return b
}

// errReport is an encoded report that cannot be read.
var errReport = errors.New("not a report of this version")

// ParseReport reads a report of region's replica encoded by
// AppendReport. A report cut short, of another version or of more than
// MaxReportBuckets buckets is an error; a quantity that is not a number
// or is negative reads as none.
func ParseReport(region, replica string, b []byte) (Report, error) {
	if len(b) < 9 || b[0] != reportVersion {
		return Report{}, errReport
	}
	body := b[9:]
	if len(body)%recordBytes != 0 {
		return Report{}, fmt.Errorf("%w: %d bytes of records, not a whole number of %d", errReport, len(body), recordBytes)
	}
	n := len(body) / recordBytes
	if n > MaxReportBuckets {
		return Report{}, fmt.Errorf("%w: %d buckets, more than %d", errReport, n, MaxReportBuckets)
	}
	r := Report{Region: region, Replica: replica, Epoch: int64(binary.BigEndian.Uint64(b[1:9])), Buckets: make(map[uint64]Record, n)}
	f := func(p []byte) float64 { return want(math.Float64frombits(binary.BigEndian.Uint64(p))) }
	for i := range n {
		p := body[i*recordBytes:]
		r.Buckets[binary.BigEndian.Uint64(p)] = Record{Demand: f(p[8:]), Usage: f(p[16:]), Bucket: Bucket{Size: f(p[24:]), Rate: f(p[32:])}}
	}
	return r, nil
}

// errNotInspectable is a wrapped store that cannot read or reset buckets.
var errNotInspectable = errors.New("this store cannot read or reset buckets")
