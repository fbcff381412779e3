// Package spell finds the name a misspelt one was meant to be.
package spell

// Distance is the Levenshtein distance of a and b: the fewest insertions,
// deletions and substitutions of bytes that make one the other.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Closest returns the name of names nearest to name, if it is near enough
// to be a misspelling of it (at most a third of its letters differ), or "".
// Of names equally near, the first is returned.
func Closest(name string, names []string) string {
	best, bestDist := "", len(name)/3+1
	for _, n := range names {
		if d := Distance(name, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}
