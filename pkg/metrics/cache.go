package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// counterCache holds the counters of a CounterVec by their label values,
// so that counting on every call skips prometheus's hashing of the label
// values and its lock, which callers on all cores share.
type counterCache[K comparable] struct {
	vec *prometheus.CounterVec
	m   sync.Map // K -> prometheus.Counter
}

// get returns the counter of key, whose label values labels gives.
func (c *counterCache[K]) get(key K, labels func() []string) prometheus.Counter {
	if v, ok := c.m.Load(key); ok {
		return v.(prometheus.Counter)
	}
	v, _ := c.m.LoadOrStore(key, c.vec.WithLabelValues(labels()...))
	return v.(prometheus.Counter)
}

type callKey struct{ domain, code string }

type decisionKey struct{ domain, limit, decision string }
