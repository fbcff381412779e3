package descriptors

import "github.com/envoy-rls/envoy-rls/pkg/bucketkey"

// KeyRule returns the rule whose bucket has this key under c: the rule
// Resolve gives that key for the descriptor the key spells. ok is false
// when no descriptor reaches a bucket with that key any more: its domain,
// its node or its limit left the config, or its limit now has another
// algorithm or window (which a key names). A key of a limit sent by Envoy
// names that limit itself: KeyRule returns a nil rule and ok true while
// its domain is in c.
//
// It is how buckets kept across a restart (a memory store's snapshot) are
// matched with the config, so it parses the format Resolve writes: the
// escaped domain, then key=value parts, then a mark.
func (c *Config) KeyRule(key string) (r *Rule, ok bool) {
	name, entries, mark, ok := bucketkey.Parse(key)
	if !ok {
		return nil, false
	}
	d := c.Domain(name)
	if d == nil {
		return nil, false
	}
	if len(mark) > 1 && mark[1] >= '0' && mark[1] <= '9' {
		return nil, true // "|#N/unit": a limit sent by Envoy
	}
	// A rule's mark Resolve adds again; a shared wildcard's bare '*'
	// stays: the value matches its pattern again, and Resolve writes the
	// pattern back.
	if len(entries) == 0 {
		return nil, false
	}
	es := make([]Entry, len(entries))
	for i, e := range entries {
		es[i] = Entry{Key: e.Key, Value: e.Value}
	}
	for _, l := range d.Resolve(es, nil, nil) {
		if l.Key == key {
			return l.Rule, true
		}
	}
	return nil, false
}
