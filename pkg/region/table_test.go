package region

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestClaimTableFind: the table finds every key it has, and none it has
// not, where a binary search would, keys spread evenly or not.
func TestClaimTableFind(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []func() uint64{rng.Uint64, func() uint64 { return rng.Uint64N(1000) }, func() uint64 { return ^rng.Uint64N(50) }} {
		for _, n := range []int{0, 1, 2, 3, 10, 1000, 20000} {
			var tab claimTable
			for range n {
				tab.keys = append(tab.keys, spread())
			}
			slices.Sort(tab.keys)
			tab.keys = slices.Compact(tab.keys)
			tab.index()
			for range 2000 {
				key := spread()
				if rng.IntN(2) == 0 && len(tab.keys) > 0 {
					key = tab.keys[rng.IntN(len(tab.keys))]
				}
				i, ok := tab.find(key)
				wi, wok := slices.BinarySearch(tab.keys, key)
				if i != wi || ok != wok {
					t.Fatalf("%d keys: find(%d) = %d, %v; want %d, %v", len(tab.keys), key, i, ok, wi, wok)
				}
			}
			for _, key := range []uint64{0, ^uint64(0)} {
				i, ok := tab.find(key)
				wi, wok := slices.BinarySearch(tab.keys, key)
				if i != wi || ok != wok {
					t.Fatalf("%d keys: find(%d) = %d, %v; want %d, %v", len(tab.keys), key, i, ok, wi, wok)
				}
			}
		}
	}
}

// BenchmarkClaimLookup is a request's look-up of its bucket's claim among
// 100,000.
func BenchmarkClaimLookup(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab claimTable
	m := map[uint64]Claim{}
	for range 100000 {
		k := rng.Uint64()
		tab.keys = append(tab.keys, k)
		m[k] = Claim{Size: 1}
	}
	slices.Sort(tab.keys)
	tab.index()
	tab.claims = make([]Claim, len(tab.keys))
	keys := slices.Clone(tab.keys)
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	b.Run("table", func(b *testing.B) {
		i := 0
		for b.Loop() {
			tab.lookup(keys[i%len(keys)])
			i++
		}
	})
	b.Run("map", func(b *testing.B) {
		i := 0
		for b.Loop() {
			_ = m[keys[i%len(keys)]]
			i++
		}
	})
}
