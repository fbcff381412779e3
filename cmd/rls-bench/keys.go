package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// The key distributions of -pick.
const (
	pickUniform = "uniform" // each request picks a key index uniformly at random
	pickTurn    = "turn"    // key indexes in turn, over all workers together
	pickZipf    = "zipf"    // Zipf-distributed key indexes, index 0 the hottest
)

const defaultZipfS = 1.1

// keyPick is how the requests of a run pick their key index.
type keyPick struct {
	name  string  // pickUniform, pickTurn or pickZipf
	zipfS float64 // the Zipf exponent, > 1; only with pickZipf
}

// parsePick checks -pick and -zipf-s; zipfSet says -zipf-s was given.
func parsePick(name string, zipfS float64, zipfSet bool) (keyPick, error) {
	switch name {
	case pickUniform, pickTurn:
		if zipfSet {
			return keyPick{}, fmt.Errorf("-zipf-s is the exponent of -pick zipf; it makes no sense with -pick %s", name)
		}
		return keyPick{name: name}, nil
	case pickZipf:
		// !(s > 1) also refuses NaN.
		if !(zipfS > 1) {
			return keyPick{}, fmt.Errorf("-zipf-s must be greater than 1, got %g", zipfS)
		}
		if math.IsInf(zipfS, 1) {
			return keyPick{}, fmt.Errorf("-zipf-s must be finite, got %g", zipfS)
		}
		return keyPick{name: name, zipfS: zipfS}, nil
	default:
		return keyPick{}, fmt.Errorf("-pick must be uniform, turn or zipf, got %q", name)
	}
}

// String names the pick as the reports and scripts/bench.sh's workloads
// do: uniform, turn, or zipf and its exponent (zipf1.1).
func (p keyPick) String() string {
	if p.name == pickZipf {
		return pickZipf + strconv.FormatFloat(p.zipfS, 'g', -1, 64)
	}
	return p.name
}

// picker returns the key index source of worker w, among keys indexes.
// rng is the worker's own generator; turn is the counter all the workers
// of a run share. The source is only called by its worker.
func (p keyPick) picker(keys int, rng *rand.Rand, turn *atomic.Uint64) func() int {
	switch p.name {
	case pickTurn:
		n := uint64(keys)
		return func() int { return int((turn.Add(1) - 1) % n) }
	case pickZipf:
		// P(k) is proportional to (1 + k)^-s, k in [0, keys-1]: rank 0 is
		// the hottest key. NewZipf only returns nil for s <= 1 or v < 1,
		// which parsePick has refused.
		z := rand.NewZipf(rng, p.zipfS, 1, uint64(keys-1))
		return func() int { return int(z.Uint64()) }
	default:
		return func() int { return rng.IntN(keys) }
	}
}
