package descriptors

// Bucket keys name one bucket unambiguously:
//
//	domain|key=value|key=value...
//
// with, per part, every byte that the format itself uses ('%', '|', '=',
// '*', '#', '{', '}') and every control byte written as %XX. So a '|' or
// '=' in a key is always a separator, no value can end one level and start
// another, and braces (a Redis Cluster hash tag) never come from a request.
// Two more marks complete the format: a shared wildcard level ends in a bare
// '*' (key=prefix*), and a limit sent by Envoy adds "|#N/unit". Every level's
// key is a prefix of the next level's, which is how Resolve builds all of a
// descriptor's keys in one allocation.

const hexDigits = "0123456789ABCDEF"

// mustEscape reports whether b is written as %XX in a key part.
func mustEscape(b byte) bool {
	switch b {
	case '%', '|', '=', '*', '#', '{', '}':
		return true
	}
	return b < 0x20 || b == 0x7f
}

// escapedLen returns the length of s once escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if mustEscape(s[i]) {
			n += 2
		}
	}
	return n
}

// appendEscaped appends s, escaped, to b.
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

func escape(s string) string {
	return string(appendEscaped(make([]byte, 0, escapedLen(s)), s))
}

// component returns the key part "key=value" of one level.
func component(key, value string) string {
	b := make([]byte, 0, escapedLen(key)+1+escapedLen(value))
	b = appendEscaped(b, key)
	b = append(b, '=')
	return string(appendEscaped(b, value))
}

// wildcardComponent returns the key part of a wildcard level whose matching
// values share one bucket: the pattern, with its '*' left bare.
func wildcardComponent(key string, parts []string) string {
	b := appendEscaped(nil, key)
	b = append(b, '=')
	for i, p := range parts {
		if i > 0 {
			b = append(b, '*')
		}
		b = appendEscaped(b, p)
	}
	return string(b)
}
