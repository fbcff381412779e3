package refstats

import (
	"fmt"
	"slices"
	"strings"
)

// Tag is a tag put on every stat sent to StatsD (the reference's
// EXTRA_TAGS).
type Tag struct{ Key, Value string }

// Tags are tags sorted by key, each key once, as the reference's stats
// library keeps them: that order is the order they are sent in.
type Tags []Tag

// ParseTags reads "key:value,key2:value2", the reference's format: each
// pair has exactly one ':', a key and a value. In a value, '.', ':' and
// '|' are sent as '_' (the reference's stats library replaces them, so
// that the value fits in a StatsD name). "" is no tags.
func ParseTags(s string) (Tags, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags Tags
	for _, pair := range strings.Split(s, ",") {
		parts := strings.Split(pair, ":")
		if len(parts) != 2 {
			return nil, fmt.Errorf("tag %q: want key:value", pair)
		}
		key, value := parts[0], parts[1]
		switch {
		case key == "" || value == "":
			return nil, fmt.Errorf("tag %q: want a key and a value", pair)
		case strings.ContainsAny(key, "|#= \t\n"):
			return nil, fmt.Errorf("tag %q: a key holds none of | # = or spaces", pair)
		case strings.ContainsAny(value, "# \t\n"):
			return nil, fmt.Errorf("tag %q: a value holds no # or spaces", pair)
		}
		if slices.ContainsFunc(tags, func(t Tag) bool { return t.Key == key }) {
			return nil, fmt.Errorf("tag %q: key %s given twice", pair, key)
		}
		tags = append(tags, Tag{key, sanitizeValue(value)})
	}
	slices.SortFunc(tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	return tags, nil
}

// String gives the tags back as ParseTags reads them.
func (ts Tags) String() string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Key + ":" + t.Value
	}
	return strings.Join(parts, ",")
}

// sanitizeValue replaces what would break a StatsD name, as the
// reference's stats library does.
func sanitizeValue(v string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', ':', '|':
			return '_'
		}
		return r
	}, v)
}

// appendToName appends the tags to a StatsD name the way the reference's
// stats library does for a plain StatsD server: ".__key=value" each.
func (ts Tags) appendToName(b []byte) []byte {
	for _, t := range ts {
		b = append(b, ".__"...)
		b = append(b, t.Key...)
		b = append(b, '=')
		b = append(b, t.Value...)
	}
	return b
}
