package main

import (
	"fmt"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// pattern is one parsed -descriptor flag: the entries of one descriptor,
// whose values may contain %d, replaced by the request's key index.
type pattern struct {
	entries []patternEntry
}

type patternEntry struct {
	key, value string
}

// parsePattern parses "key=value,key=value". Values may be empty (the proto
// allows it) but keys may not, and every entry needs an '='.
func parsePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, fmt.Errorf("descriptor pattern %q: empty", s)
	}
	var p pattern
	for e := range strings.SplitSeq(s, ",") {
		key, value, ok := strings.Cut(e, "=")
		switch {
		case !ok:
			return pattern{}, fmt.Errorf("descriptor pattern %q: entry %q has no '=' (want key=value)", s, e)
		case key == "":
			return pattern{}, fmt.Errorf("descriptor pattern %q: entry %q has an empty key", s, e)
		}
		p.entries = append(p.entries, patternEntry{key: key, value: value})
	}
	return p, nil
}

// descriptor builds the descriptor for key index i.
func (p pattern) descriptor(i int) *ratelimitv3.RateLimitDescriptor {
	idx := strconv.Itoa(i)
	d := &ratelimitv3.RateLimitDescriptor{
		Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, len(p.entries)),
	}
	for j, e := range p.entries {
		d.Entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{
			Key:   e.key,
			Value: strings.ReplaceAll(e.value, "%d", idx),
		}
	}
	return d
}

// buildRequests prebuilds one request per key index, so the hot loop only
// picks one: gRPC only reads a message to marshal it, so workers may share
// them.
func buildRequests(domain string, patterns []pattern, keys int, hits uint32) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		r := &rlsv3.RateLimitRequest{
			Domain:      domain,
			Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(patterns)),
			HitsAddend:  hits,
		}
		for j, p := range patterns {
			r.Descriptors[j] = p.descriptor(i)
		}
		reqs[i] = r
	}
	return reqs
}
