package descriptors

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// reader walks yaml.v3 nodes of one file and records problems with their
// line and field path, so that one pass reports every mistake in the file.
type reader struct {
	file     string
	errors   []Problem
	warnings []Problem
	repeats  map[string]*repeat // warnings given once per field name
}

// repeat is a warning about a field name and how many more places have it.
type repeat struct {
	index int
	more  int
}

func (r *reader) errorf(n *yaml.Node, field, format string, args ...any) {
	r.errors = append(r.errors, Problem{File: r.file, Line: line(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

// warnOnce records a warning about a field name once per file; later places
// only add to a count that finish appends to the message.
func (r *reader) warnOnce(n *yaml.Node, field, name, msg string) {
	if r.repeats == nil {
		r.repeats = map[string]*repeat{}
	}
	if rep, ok := r.repeats[name]; ok {
		rep.more++
		return
	}
	r.repeats[name] = &repeat{index: len(r.warnings)}
	r.warnings = append(r.warnings, Problem{File: r.file, Line: line(n), Field: field, Msg: msg})
}

// finish completes the messages of repeated warnings.
func (r *reader) finish() {
	for _, rep := range r.repeats {
		switch {
		case rep.more == 1:
			r.warnings[rep.index].Msg += " (and 1 more place in this file)"
		case rep.more > 1:
			r.warnings[rep.index].Msg += fmt.Sprintf(" (and %d more places in this file)", rep.more)
		}
	}
}

func (r *reader) warnf(n *yaml.Node, field, format string, args ...any) {
	r.warnings = append(r.warnings, Problem{File: r.file, Line: line(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// field is one key: value pair of a mapping.
type field struct {
	name  string
	key   *yaml.Node
	value *yaml.Node
}

// mapping returns the pairs of a mapping node in order. It reports a node
// that is not a mapping, keys that are not strings, keys outside known and
// keys given twice, and returns only the usable pairs.
func (r *reader) mapping(n *yaml.Node, path string, known []string) ([]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		r.errorf(n, path, "must be a mapping of fields, got %s", kindName(n))
		return nil, false
	}
	fields := make([]field, 0, len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			r.errorf(k, path, "field names must be strings, got %s", kindName(k))
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			r.errorf(k, join(path, name), "given twice (first on line %d)", first)
			continue
		}
		seen[name] = k.Line
		if !slices.Contains(known, name) {
			r.errorf(k, join(path, name), "unknown field%s (known fields: %s)", suggest(name, known), strings.Join(known, ", "))
			continue
		}
		fields = append(fields, field{name: name, key: k, value: v})
	}
	return fields, true
}

// sequence returns the items of a sequence node; null is an empty sequence.
func (r *reader) sequence(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = deref(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, path, "must be a list, got %s", kindName(n))
		return nil, false
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = deref(c)
	}
	return items, true
}

// text returns a scalar's text; numbers and booleans are read as written.
// Null reads as "".
func (r *reader) text(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		r.errorf(n, path, "must be a string, got %s", kindName(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

// integer returns a scalar integer within [min, max].
func (r *reader) integer(n *yaml.Node, path string, min, max int64) (int64, bool) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		r.errorf(n, path, "must be a whole number, got %s", describe(n))
		return 0, false
	}
	if v < min || v > max {
		r.errorf(n, path, "must be between %d and %d, got %d", min, max, v)
		return 0, false
	}
	return v, true
}

func (r *reader) boolean(n *yaml.Node, path string) (bool, bool) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		r.errorf(n, path, "must be true or false, got %s", describe(n))
		return false, false
	}
	return v, true
}

// duration returns a positive Go duration such as 1s, 250ms or 1m30s.
func (r *reader) duration(n *yaml.Node, path string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		r.errorf(n, path, "must be a duration such as 1s or 250ms, got %s", describe(n))
		return 0, false
	}
	if n.Tag == "!!int" || n.Tag == "!!float" {
		r.errorf(n, path, "%q has no unit: write it as a duration such as 1s or 250ms", n.Value)
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		r.errorf(n, path, "%q is not a duration such as 1s or 250ms", n.Value)
		return 0, false
	}
	if d <= 0 {
		r.errorf(n, path, "must be greater than zero, got %s", n.Value)
		return 0, false
	}
	return d, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return describe(n)
	}
	return "nothing"
}

// describe names a scalar for an error message.
func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return kindName(n)
	}
	if isNull(n) {
		return "nothing"
	}
	return strconv.Quote(n.Value)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// suggest returns ` (did you mean "x"?)` for the known name closest to a
// misspelled one (a small edit away, or the start of it), or "".
func suggest(name string, known []string) string {
	lower := strings.ToLower(name)
	best, bestDist := "", math.MaxInt
	for _, k := range known {
		d := editDistance(lower, k)
		if len(lower) >= 4 && (strings.HasPrefix(k, lower) || strings.HasPrefix(lower, k)) {
			d = min(d, 2)
		}
		if d < bestDist {
			best, bestDist = k, d
		}
	}
	if bestDist <= 2 || (bestDist <= 3 && len(name) > 8) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
