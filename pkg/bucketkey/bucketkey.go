// Package bucketkey reads the bucket keys package descriptors writes:
//
//	domain|key=value|key=value...|#mark
//
// every domain, key and value escaped (a byte that would end a part, and
// '%', as %XX in upper-case hex), the mark naming the limit's algorithm
// and window. It is for those that take a key apart again, such as a
// memory snapshot matched with the config and a store that writes the
// reference's keys.
package bucketkey

import "strings"

// Entry is a descriptor entry of a key, unescaped.
type Entry struct{ Key, Value string }

// Parse splits a bucket key into its domain, its entries and its mark
// (the last part, '#' included; "" when there is none), undoing the
// escaping. A shared wildcard's bare '*' stays as written. ok is false for
// a key not of the format: a part without '=', or a '%' not followed by
// two upper-case hex digits.
func Parse(key string) (domain string, entries []Entry, mark string, ok bool) {
	parts := strings.Split(key, "|")
	if domain, ok = Unescape(parts[0]); !ok {
		return "", nil, "", false
	}
	parts = parts[1:]
	if n := len(parts); n > 0 && strings.HasPrefix(parts[n-1], "#") {
		mark, parts = parts[n-1], parts[:n-1]
	}
	entries = make([]Entry, len(parts))
	for i, p := range parts {
		k, v, found := strings.Cut(p, "=") // a key's '=' is escaped
		if !found {
			return "", nil, "", false
		}
		if entries[i].Key, ok = Unescape(k); !ok {
			return "", nil, "", false
		}
		if entries[i].Value, ok = Unescape(v); !ok {
			return "", nil, "", false
		}
	}
	return domain, entries, mark, true
}

const hexDigits = "0123456789ABCDEF"

// Unescape undoes the escaping of a key's part: %XX to its byte. ok is
// false for a '%' not followed by two upper-case hex digits.
func Unescape(s string) (string, bool) {
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
