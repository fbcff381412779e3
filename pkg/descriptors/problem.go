package descriptors

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Problem is one error or warning about a config file, with its place.
type Problem struct {
	File  string // the file's path as it was loaded
	Line  int    // 1-based; 0 when the problem concerns the whole file
	Field string // the YAML path of the field, e.g. descriptors[0].leaky_bucket.size
	Msg   string
	// Column is the 1-based column (in characters) on Line, where known;
	// 0 otherwise.
	Column int
	// Text is the line a YAML syntax error is on, as written (at most
	// maxTextBytes of it), for Excerpt to show; "" for other problems.
	Text string
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

// excerptIndent starts each line of an excerpt: it sets them apart from
// the messages, and shows where the quoted line's own indentation starts.
const excerptIndent = "  | "

// excerptWidth is how many characters of a long line an excerpt shows.
const excerptWidth = 100

// Detail is String, followed on the lines below by the Excerpt, if any.
func (p Problem) Detail() string {
	if x := p.Excerpt(); x != "" {
		return p.String() + "\n" + x
	}
	return p.String()
}

// Excerpt shows where a syntax error is: the line's text, then a caret
// under the column when it is known, each line starting with "  | ". It
// is "" for problems without Text. A long line is shown around the column.
func (p Problem) Excerpt() string {
	if p.Text == "" {
		return ""
	}
	text, col := excerptWindow([]rune(p.Text), p.Column)
	var b strings.Builder
	b.WriteString(excerptIndent)
	b.WriteString(string(text))
	if col > 0 {
		b.WriteByte('\n')
		b.WriteString(excerptIndent)
		// Tabs before the column are copied, so the caret lines up
		// whatever a terminal's tab width.
		for _, r := range text[:col-1] {
			if r == '\t' {
				b.WriteByte('\t')
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteByte('^')
	}
	return b.String()
}

// excerptWindow returns at most excerptWidth characters of text around
// col, with "..." where it is cut, and col's place in them (0: none).
func excerptWindow(text []rune, col int) ([]rune, int) {
	if col > len(text)+1 || col < 0 {
		col = 0 // not on this line's text: no caret rather than a wrong one
	}
	if len(text) <= excerptWidth {
		return text, col
	}
	start := 0
	if col > excerptWidth*2/3 {
		start = min(col-1-excerptWidth/3, len(text)-excerptWidth)
	}
	end := min(start+excerptWidth, len(text))
	shown := append([]rune(nil), text[start:end]...)
	if end < len(text) {
		shown = append(shown, []rune("...")...)
	}
	if start > 0 {
		shown = append([]rune("..."), shown...)
		if col > 0 {
			col += 3 - start
		}
	}
	return shown, col
}

// Error is an invalid configuration: every problem found, in file order,
// and within a file in line order.
type Error struct {
	Problems []Problem
}

// Error lists the problems, one per line, each followed by its excerpt
// (the line's text and a caret) if it has one.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Detail())
	}
	return b.String()
}

// sortProblems puts one file's problems in line order, then column
// order; those at one place keep the order they were found in.
func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}
