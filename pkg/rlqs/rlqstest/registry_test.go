package rlqstest

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// TestMemoryRegistry runs the suite against the in-process registry: its
// replicas are one registry, as the replicas of one process share it.
func TestMemoryRegistry(t *testing.T) {
	Run(t, func(t *testing.T, n int) []rlqs.Registry {
		r := rlqs.NewMemoryRegistry(0)
		rs := make([]rlqs.Registry, n)
		for i := range rs {
			rs[i] = r
		}
		return rs
	})
}
