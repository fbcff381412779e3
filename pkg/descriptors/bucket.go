package descriptors

import (
	"maps"
	"slices"
)

// BucketEntries is the request descriptor a bucket's pairs stand for, as
// the service reads an RLQS BucketId: Order's entries, or, when no node asks
// for any pair, every pair in key order (where the walk stops at once, as
// for a descriptor of the pairs in any order).
func (d *Domain) BucketEntries(pairs map[string]string) []Entry {
	if es := d.Order(pairs); len(es) > 0 {
		return es
	}
	keys := slices.Sorted(maps.Keys(pairs))
	es := make([]Entry, len(keys))
	for i, k := range keys {
		es[i] = Entry{Key: k, Value: pairs[k]}
	}
	return es
}

// Order returns the pairs of an unordered bucket (an RLQS BucketId: a map
// of key and value) as the entries of a request descriptor, in the order
// the domain's tree asks for them: at each level the pair a node there
// matches, taking the walk that goes deepest when pairs of several keys
// match (and, among walks as deep, the key first written in the file).
// Pairs no node on that walk asks for are left out. Resolve takes the
// entries as it takes a descriptor's. Order is pure; pairs is not changed.
func (d *Domain) Order(pairs map[string]string) []Entry {
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a map's order is random: the walk must not be
	used := make([]bool, len(keys))
	var best, walk []Entry
	visits := 0
	var search func(lv *level)
	search = func(lv *level) {
		if len(walk) > len(best) {
			best = append(best[:0], walk...)
		}
		if visits++; lv == nil || len(walk) == len(keys) || visits > maxOrderVisits {
			return
		}
		for _, k := range levelKeys(lv) {
			i, found := slices.BinarySearch(keys, k)
			if !found || used[i] {
				continue
			}
			n := lv.match(k, pairs[k])
			if n == nil {
				continue
			}
			used[i] = true
			walk = append(walk, Entry{Key: k, Value: pairs[k]})
			search(n.children)
			walk = walk[:len(walk)-1]
			used[i] = false
		}
	}
	search(d.root)
	return best
}

// maxOrderVisits bounds the nodes Order visits: a tree where many keys
// match at every level has walks without number; past the bound, the
// deepest walk found so far is taken.
const maxOrderVisits = 4096

// levelKeys returns the keys of a level's nodes, each once, in the order
// they are written.
func levelKeys(lv *level) []string {
	var keys []string
	for _, n := range lv.order {
		if !slices.Contains(keys, n.key) {
			keys = append(keys, n.key)
		}
	}
	return keys
}
