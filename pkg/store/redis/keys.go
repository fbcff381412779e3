package redis

import (
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// DefaultPrefix starts every Redis key the store writes.
const DefaultPrefix = "rls:"

// redisKey returns the Redis key of a bucket:
//
//	prefix + "{" + domain|first-entry + "}" + |next|entries...
//
// The hash tag holds the domain and the first entry of the descriptor, so
// every level of one hierarchy (api|user=alice, api|user=alice|action=trade)
// lands in one Cluster slot and one script call decides them all. Bucket keys
// from package descriptors escape '{', '}' and '|' in values, so no value can
// choose the tag; and whatever the bucket key, the Redis key determines it
// (the inserted '}' sits just before its second '|', or at the end).
func redisKey(prefix, bucketKey string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(bucketKey) + 2)
	writeRedisKey(&b, prefix, bucketKey)
	return b.String()
}

// writeRedisKey writes the Redis key of a bucket to b:
// len(prefix)+len(bucketKey)+2 bytes.
func writeRedisKey(b *strings.Builder, prefix, bucketKey string) {
	tagEnd := len(bucketKey)
	if first := strings.IndexByte(bucketKey, '|'); first >= 0 {
		if second := strings.IndexByte(bucketKey[first+1:], '|'); second >= 0 {
			tagEnd = first + 1 + second
		}
	}
	b.WriteString(prefix)
	b.WriteByte('{')
	b.WriteString(bucketKey[:tagEnd])
	b.WriteByte('}')
	b.WriteString(bucketKey[tagEnd:])
}

// bucketKeys returns the Redis keys of buckets, all in one string's memory
// (one allocation rather than one per key).
func bucketKeys(prefix string, buckets []limit.Bucket) []string {
	n := 0
	for _, bk := range buckets {
		n += len(prefix) + len(bk.Key) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, bk := range buckets {
		writeRedisKey(&b, prefix, bk.Key)
	}
	all := b.String()
	keys := make([]string, len(buckets))
	for i, bk := range buckets {
		size := len(prefix) + len(bk.Key) + 2
		keys[i], all = all[:size], all[size:]
	}
	return keys
}

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// slot returns the Cluster hash slot of a Redis key, by Redis's rule: the
// CRC16 of the text between the first '{' and the next '}', if that is not
// empty, else of the whole key.
func slot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return crc16(key) % slotCount
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021), as Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// Slot returns the Redis Cluster hash slot of a Redis key.
func Slot(key string) uint16 { return slot(key) }
