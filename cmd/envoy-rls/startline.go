package main

import (
	"fmt"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// mode says how the store decides, for the start-up line: what an
// operator checks first when answers surprise them.
func (s *settings) mode() string {
	switch {
	case s.store.value == memoryStore && s.snapshot.path != "":
		return fmt.Sprintf("memory, snapshot to %s every %s", s.snapshot.path, s.snapshot.interval)
	case s.store.value == memoryStore:
		return "memory (one replica; counts lost on restart without -memory-snapshot)"
	case s.store.value == memcachedStore:
		return "exact: every request decided on memcached"
	case s.syncInterval > 0:
		return fmt.Sprintf("local-first, syncing with Redis every %s", s.syncInterval)
	}
	return "exact: every request decided on Redis"
}

// drop-in says, started as envoyproxy/ratelimit, which of its defaults are
// in force and how to have envoy-rls's own: "" when started otherwise.
func (s *settings) dropIn() string {
	if !s.reference {
		return ""
	}
	o := s.configOptions()
	var ref, own []string
	note := func(isRef bool, refText, flag, ownValue string) {
		if isRef {
			ref = append(ref, refText)
			own = append(own, envName(flag)+"="+ownValue)
		}
	}
	note(o.RateLimitAlgorithm == limit.FixedWindow, "rate_limit as fixed windows", "rate-limit-algorithm", "leaky_bucket")
	note(o.Leaf, "only the deepest node counts", "match", "all")
	note(o.Charge == descriptors.ChargeAlways, "every hit charged", "charge", "admitted")
	note(s.responseHeaders.value == rls.NoHeaders, "no response headers", "response-headers", "leaky")
	note(s.responseHeaders.value == rls.EnvoyproxyHeaders, "its RateLimit-* headers", "response-headers", "leaky")
	if len(ref) == 0 {
		return "started as envoyproxy/ratelimit, with envoy-rls's own rules (RLS_ variables)"
	}
	return "envoyproxy/ratelimit's defaults: " + strings.Join(ref, ", ") + "; envoy-rls's own with " + strings.Join(own, ", ")
}
