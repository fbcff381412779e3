package region

import "math/bits"

// claimTable is the claims a replica's region holds, by bucket key hash,
// in the order of the keys: what a division puts in force, whole, for the
// requests to read. Made in order, it costs a division two arrays where a
// map would cost 100,000 insertions, and a report goes through it beside
// the buckets, in the same order.
//
// Keys are hashes, spread evenly: starts[b] is where the keys whose top
// bits are b start (as many top bits as the keys have bits to tell them
// apart by, about one key each), so that a look-up reads a start and a
// key or two.
type claimTable struct {
	keys   []uint64
	claims []Claim
	shift  uint
	starts []int32
}

// index makes starts, once keys are in place.
func (t *claimTable) index() {
	n := len(t.keys)
	top := bits.Len(uint(n)) // 2^top > n
	t.shift = uint(64 - top)
	t.starts = make([]int32, 1<<top+1)
	b := 0
	for i, k := range t.keys {
		for ; b <= int(k>>t.shift); b++ {
			t.starts[b] = int32(i)
		}
	}
	for ; b < len(t.starts); b++ {
		t.starts[b] = int32(n)
	}
}

// lookup returns the claim of key.
func (t *claimTable) lookup(key uint64) (Claim, bool) {
	if i, ok := t.find(key); ok {
		return t.claims[i], true
	}
	return Claim{}, false
}

// find returns where key is, or would be, in keys: among those of its
// top bits, by halves where there are many (keys not spread evenly: a
// key's hash is no secret, and keys may be chosen to share top bits).
func (t *claimTable) find(key uint64) (int, bool) {
	if len(t.starts) == 0 {
		return 0, false
	}
	b := key >> t.shift
	lo, hi := int(t.starts[b]), int(t.starts[b+1])
	for hi-lo > 8 {
		m := int(uint(lo+hi) >> 1)
		if t.keys[m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for lo < hi && t.keys[lo] < key {
		lo++
	}
	return lo, lo < len(t.keys) && t.keys[lo] == key
}
