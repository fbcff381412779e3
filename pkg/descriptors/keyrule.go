package descriptors

import "strings"

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
	parts := strings.Split(key, "|")
	name, ok := unescape(parts[0])
	if !ok {
		return nil, false
	}
	d := c.Domain(name)
	if d == nil {
		return nil, false
	}
	parts = parts[1:]
	if n := len(parts); n > 0 && strings.HasPrefix(parts[n-1], "#") {
		if m := parts[n-1]; len(m) > 1 && m[1] >= '0' && m[1] <= '9' {
			return nil, true // "|#N/unit": a limit sent by Envoy
		}
		parts = parts[:n-1] // a rule's mark, which Resolve adds again
	}
	if len(parts) == 0 {
		return nil, false
	}
	entries := make([]Entry, len(parts))
	for i, p := range parts {
		k, v, found := strings.Cut(p, "=") // a key's '=' is escaped
		if !found {
			return nil, false
		}
		// A shared wildcard's bare '*' stays: the value matches its
		// pattern again, and Resolve writes the pattern back.
		if entries[i].Key, ok = unescape(k); !ok {
			return nil, false
		}
		if entries[i].Value, ok = unescape(v); !ok {
			return nil, false
		}
	}
	for _, l := range d.Resolve(entries, nil, nil) {
		if l.Key == key {
			return l.Rule, true
		}
	}
	return nil, false
}

// unescape undoes escape: %XX to its byte. ok is false for a '%' not
// followed by two upper-case hex digits.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	return string(b), true
}
