package metrics

import (
	"sync"
)

// seriesCache holds the series (counters, histograms) of a metric vector
// by their label values, so that counting on every call skips prometheus's
// hashing of the label values and its lock, which callers on all cores
// share: a load from a sync.Map that is only ever added to is lock-free.
type seriesCache[K comparable, S any] struct {
	with func(labels ...string) S // the vector's WithLabelValues
	m    sync.Map                 // K -> S
}

// get returns the series of key, whose label values labels gives.
func (c *seriesCache[K, S]) get(key K, labels func() []string) S {
	if v, ok := c.m.Load(key); ok {
		return v.(S)
	}
	v, _ := c.m.LoadOrStore(key, c.with(labels()...))
	return v.(S)
}

type callKey struct{ domain, code string }

type decisionKey struct{ domain, limit, decision string }

type limitKey struct{ domain, limit string }

type storeKey struct{ store, op string }
