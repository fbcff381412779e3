package descriptors

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/internal/spell"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// reader walks yaml.v3 nodes of one file and records problems with their
// line and field path, so that one pass reports every mistake in the file
// (up to maxProblems errors, and as many warnings).
type reader struct {
	file        string
	errors      problemList
	warnings    problemList
	repeats     map[string]*repeat // warnings given once per field name
	hasReplaces bool               // some limit replaces others: check the names
	// unmatched are the replaces naming no limit of the file: warnings,
	// unless a file merged into the same domain has the limit.
	unmatched []unmatchedReplace
	// algorithm is what a rate_limit becomes: the file's
	// rate_limit_algorithm, else the default the reader was given.
	algorithm limit.Algorithm
	// calendar is the file's calendar and time_zone, for its rate_limits.
	calendar fileCalendar
	// charge and leaf are the defaults of a file without charge or match.
	charge Charge
	leaf   bool
	// metadataRead holds each metadata mapping read, by node, so that
	// aliases of one share its reading.
	metadataRead map[*yaml.Node]map[string]any
}

// maxProblems bounds the errors, and the warnings, listed per file: a few
// lines of aliases can repeat one mistake a hundred thousand times, which
// would be as many log lines.
const maxProblems = 100

// dropped counts the problems of a file beyond maxProblems.
type dropped struct {
	n, line int // how many; the line of the first
}

func (d *dropped) add(line int) {
	if d.n == 0 {
		d.line = line
	}
	d.n++
}

// problem is the line that stands for the problems dropped, if any.
func (d *dropped) problem(file, kind string) []Problem {
	if d.n == 0 {
		return nil
	}
	return []Problem{{File: file, Line: max(d.line, 1),
		Msg: fmt.Sprintf("and %d more %s in this file, the first on this line: only the first %d are listed", d.n, kind, maxProblems)}}
}

// problemList is a file's errors, or its warnings: the first maxProblems,
// and a count of the rest.
type problemList struct {
	list []Problem
	more dropped
}

// full reports whether the list holds all it may; then the problem at
// line is counted among the rest, and its message need not be made.
func (l *problemList) full(line int) bool {
	if len(l.list) < maxProblems {
		return false
	}
	l.more.add(line)
	return true
}

// add records a problem of file, unless the list is full.
func (l *problemList) add(file string, p Problem) {
	if !l.full(p.Line) {
		p.File = file
		l.list = append(l.list, p)
	}
}

// addError records an error of this file, unless there are enough.
func (r *reader) addError(p Problem) { r.errors.add(r.file, p) }

// addWarning records a warning of this file, unless there are enough.
func (r *reader) addWarning(p Problem) { r.warnings.add(r.file, p) }

// repeat is a warning about a field name and how many more places have it.
type repeat struct {
	index int
	more  int
}

func (r *reader) errorf(n *yaml.Node, p *fieldPath, format string, args ...any) {
	if r.errors.full(line(n)) { // before the message is made
		return
	}
	r.addError(Problem{Line: line(n), Column: column(n), Field: p.String(), Msg: fmt.Sprintf(format, args...)})
}

// warnOnce records a warning about a field name once per file; later places
// only add to a count that finish appends to the message.
func (r *reader) warnOnce(n *yaml.Node, p *fieldPath, name, msg string) {
	if r.repeats == nil {
		r.repeats = map[string]*repeat{}
	}
	if rep, ok := r.repeats[name]; ok {
		rep.more++
		return
	}
	if r.warnings.full(line(n)) {
		return
	}
	r.repeats[name] = &repeat{index: len(r.warnings.list)}
	r.addWarning(Problem{Line: line(n), Column: column(n), Field: p.String(), Msg: msg})
}

// finish completes the messages of repeated warnings, and says how many
// problems were not listed.
//
// The problems are put in line order: they are found in the order the
// fields are read, which is not always the file's (the descriptors are
// read after the fields that say how). The line counting those not
// listed stays last.
func (r *reader) finish() {
	for _, rep := range r.repeats { // before sorting: rep.index is a place in the list
		switch {
		case rep.more == 1:
			r.warnings.list[rep.index].Msg += " (and 1 more place in this file)"
		case rep.more > 1:
			r.warnings.list[rep.index].Msg += fmt.Sprintf(" (and %d more places in this file)", rep.more)
		}
	}
	sortProblems(r.errors.list)
	sortProblems(r.warnings.list)
	r.errors.list = append(r.errors.list, r.errors.more.problem(r.file, "errors")...)
	r.warnings.list = append(r.warnings.list, r.warnings.more.problem(r.file, "warnings")...)
}

func (r *reader) warnf(n *yaml.Node, p *fieldPath, format string, args ...any) {
	if r.warnings.full(line(n)) {
		return
	}
	r.addWarning(Problem{Line: line(n), Column: column(n), Field: p.String(), Msg: fmt.Sprintf(format, args...)})
}

// fieldPath is a field's place in its file, such as
// descriptors[0].leaky_bucket.size: a chain of values on the reader's
// stack, from a descriptor or (nil) the file itself. It is made into text
// only for a problem, not for each of the hundreds of thousands of fields
// of a large file.
type fieldPath struct {
	up    *fieldPath
	node  *rawNode // where the path starts when up is nil; nil: the file
	name  string   // the field's name; "" for a list's item (or node's path)
	index int      // a list item's index
}

// field returns the path of the field name of the mapping at p.
func (p *fieldPath) field(name string) fieldPath { return fieldPath{up: p, name: name} }

// item returns the path of item i of the list at p.
func (p *fieldPath) item(i int) fieldPath { return fieldPath{up: p, index: i} }

func (p *fieldPath) String() string { return string(p.appendTo(nil)) }

func (p *fieldPath) appendTo(b []byte) []byte {
	if p == nil {
		return b
	}
	switch {
	case p.up != nil:
		b = p.up.appendTo(b)
	case p.node != nil:
		b = p.node.appendPath(b)
		if p.name == "" {
			return b // the descriptor itself
		}
	}
	if p.name == "" {
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(p.index), 10)
		return append(b, ']')
	}
	if len(b) > 0 {
		b = append(b, '.')
	}
	return append(b, clip(p.name)...) // an unknown field's name may be long
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

func column(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Column
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

// mapping returns the pairs of a mapping node in order, appended to
// fields (a buffer of the caller's, with room for every known field). It
// reports a node that is not a mapping, keys that are not strings, keys
// outside known and keys given twice, and returns only the usable pairs.
func (r *reader) mapping(n *yaml.Node, p *fieldPath, known []string, fields []field) ([]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		r.errorf(n, p, "must be a mapping of fields, got %s", kindName(n))
		return nil, false
	}
next:
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			r.errorf(k, p, "field names must be strings, got %s", kindName(k))
			continue
		}
		name := k.Value
		fp := p.field(name)
		// A linear search: fields holds at most the few known names.
		for _, f := range fields {
			if f.name == name {
				r.errorf(k, &fp, "given twice (first on line %d)", f.key.Line)
				continue next
			}
		}
		if !slices.Contains(known, name) {
			if !r.errors.full(k.Line) { // else without the suggestion's cost
				r.errorf(k, &fp, "unknown field%s (known fields: %s)", suggest(name, known), strings.Join(known, ", "))
			}
			continue
		}
		fields = append(fields, field{name: name, key: k, value: v})
	}
	return fields, true
}

// sequence returns the items of a sequence node, which may be aliases;
// null is an empty sequence.
func (r *reader) sequence(n *yaml.Node, p *fieldPath) ([]*yaml.Node, bool) {
	n = deref(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, p, "must be a list, got %s", kindName(n))
		return nil, false
	}
	return n.Content, true
}

// text returns a scalar's text; numbers and booleans are read as written.
// Null reads as "".
func (r *reader) text(n *yaml.Node, p *fieldPath) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		r.errorf(n, p, "must be a string, got %s", kindName(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

// integer returns a scalar integer within [min, max].
func (r *reader) integer(n *yaml.Node, p *fieldPath, min, max int64) (int64, bool) {
	v, ok := scalarInt(n)
	if !ok {
		r.errorf(n, p, "must be a whole number, got %s", describe(n))
		return 0, false
	}
	if v < min || v > max {
		r.errorf(n, p, "must be between %d and %d, got %d", min, max, v)
		return 0, false
	}
	return v, true
}

// scalarInt reads an !!int scalar as yaml.v3 does. The usual spelling,
// decimal digits without a leading zero (which YAML reads as octal), is
// read here: Node.Decode builds a decoder on each call, which for a large
// file is tens of megabytes.
func scalarInt(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, false
	}
	digits := strings.TrimLeft(n.Value, "+-")
	if len(n.Value)-len(digits) <= 1 && (len(digits) == 1 || (len(digits) > 1 && digits[0] != '0')) {
		if v, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			return v, true
		}
	}
	var v int64
	return v, n.Decode(&v) == nil
}

func (r *reader) boolean(n *yaml.Node, p *fieldPath) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		switch n.Value { // the spellings YAML 1.2 has; others through Decode
		case "true", "True", "TRUE":
			return true, true
		case "false", "False", "FALSE":
			return false, true
		}
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		r.errorf(n, p, "must be true or false, got %s", describe(n))
		return false, false
	}
	return v, true
}

// duration returns a positive Go duration such as 1s, 250ms or 1m30s.
func (r *reader) duration(n *yaml.Node, p *fieldPath) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		r.errorf(n, p, "must be a duration such as 1s or 250ms, got %s", describe(n))
		return 0, false
	}
	if n.Tag == "!!int" || n.Tag == "!!float" {
		r.errorf(n, p, "%q has no unit: write it as a duration such as 1s or 250ms", clip(n.Value))
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		r.errorf(n, p, "%q is not a duration such as 1s or 250ms", clip(n.Value))
		return 0, false
	}
	if d <= 0 {
		r.errorf(n, p, "must be greater than zero, got %s", clip(n.Value))
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
	return strconv.Quote(clip(n.Value))
}

// clip shortens text of a config for a message: a value may be megabytes
// long, and repeated through aliases in every problem.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// suggest returns ` (did you mean "x"?)` for the known name closest to a
// misspelled one (a small edit away, or the start of it), or "".
func suggest(name string, known []string) string {
	if len(name) > 64 {
		return "" // no misspelling of a field name; and the cost is quadratic
	}
	lower := strings.ToLower(name)
	best, bestDist := "", math.MaxInt
	for _, k := range known {
		d := spell.Distance(lower, k)
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
