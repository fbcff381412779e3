package descriptors

import (
	"fmt"
	"strings"
)

// Problem is one error or warning about a config file, with its place.
type Problem struct {
	File  string // the file's path as it was loaded
	Line  int    // 1-based; 0 when the problem concerns the whole file
	Field string // the YAML path of the field, e.g. descriptors[0].leaky_bucket.size
	Msg   string
}

// String formats p as "file:line: field: message".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is an invalid configuration: every problem found, in file order.
type Error struct {
	Problems []Problem
}

// Error lists the problems, one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}
