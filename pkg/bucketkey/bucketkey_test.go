package bucketkey

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		key     string
		domain  string
		entries []Entry
		mark    string
		ok      bool
	}{
		{"api|user=alice|action=trade", "api", []Entry{{"user", "alice"}, {"action", "trade"}}, "", true},
		{"api|user=alice|#fw1m", "api", []Entry{{"user", "alice"}}, "#fw1m", true},
		{"api|#3/minute/fw", "api", []Entry{}, "#3/minute/fw", true},
		{"a%7Cb|k%3Dx=v%25%7C|path=*", "a|b", []Entry{{"k=x", "v%|"}, {"path", "*"}}, "", true},
		{"api|user", "", nil, "", false},
		{"api|user=%7", "", nil, "", false},
		{"api|user=%zz", "", nil, "", false},
		{"ap%|user=a", "", nil, "", false},
	} {
		domain, entries, mark, ok := Parse(c.key)
		if ok != c.ok || domain != c.domain || mark != c.mark || (c.ok && !reflect.DeepEqual(entries, c.entries)) {
			t.Errorf("Parse(%q) = %q, %v, %q, %v; want %q, %v, %q, %v", c.key, domain, entries, mark, ok, c.domain, c.entries, c.mark, c.ok)
		}
	}
}
