package descriptors

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlMessage is what this package knows of one of yaml.v3's syntax
// error messages.
type yamlMessage struct {
	parser bool // the parser's, whose line counts from 0 (the scanner's from 1)
	// exact: the line named is the mistake's, so a detector's finding
	// elsewhere is not this mistake.
	exact     bool
	detectors detectorSet // the detectors that find such mistakes
}

type detectorSet int

const (
	detectUnclosed detectorSet = 1 << iota
	detectTab
	detectIndent
	detectColon
)

var yamlMessages = map[string]yamlMessage{
	"did not find expected ',' or '}'":                             {parser: true, detectors: detectUnclosed},
	"did not find expected ',' or ']'":                             {parser: true, detectors: detectUnclosed},
	"did not find expected node content":                           {parser: true, detectors: detectUnclosed | detectIndent},
	"did not find expected '-' indicator":                          {parser: true, detectors: detectIndent},
	"did not find expected key":                                    {parser: true, detectors: detectIndent},
	"did not find expected <document start>":                       {parser: true},
	"found unexpected end of stream":                               {detectors: detectUnclosed},
	"found a tab character that violates indentation":              {detectors: detectTab},
	"found a tab character where an indentation space is expected": {detectors: detectTab},
	"found character that cannot start any token":                  {exact: true, detectors: detectTab},
	"mapping values are not allowed in this context":               {exact: true, detectors: detectIndent | detectColon},
	"block sequence entries are not allowed in this context":       {exact: true, detectors: detectIndent},
	"did not find expected <stream-start>":                         {parser: true},
	"found duplicate %YAML directive":                              {parser: true},
	"found duplicate %TAG directive":                               {parser: true},
	"found incompatible YAML document":                             {parser: true},
	"found undefined tag handle":                                   {parser: true},
}

// maxTextBytes bounds Problem.Text: a line may be megabytes long.
const maxTextBytes = 1024

// yamlProblem turns a YAML syntax error into a Problem at the mistake's
// line and column, with the line's text, and the parser's message. The
// place is a detector's when one finds the kind of mistake the message is
// about (see yamlscan.go), else the line the parser names (counted from 1),
// else that of the first control character (which YAML refuses without
// saying where), else line 1.
func yamlProblem(file string, data []byte, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	named := 0 // the line yaml.v3 names, as it counts
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		named, _ = strconv.Atoi(m[1])
		msg = err.Error()[len(m[0]):]
	}
	p := Problem{File: file, Line: 1, Msg: "invalid YAML: " + msg}
	off := -1 // the mistake's byte offset in its line, if known
	known, isKnown := yamlMessages[msg]
	// The line named, counted from 1: the mistake's, or that of what the
	// parser was reading when it found it, above. Without a number, 1.
	from := max(named, 1)
	if known.parser {
		from = named + 1
	}
	switch f := locateFault(data, known, from); {
	case f != nil:
		p.Line, off = f.line, f.off
		p.Msg += " (" + f.why + ")"
	case named > 0 || isKnown:
		p.Line = from
	default: // the reader's errors: a character YAML refuses
		if i := firstUnreadable(data); i >= 0 {
			p.Line = 1 + bytes.Count(data[:i], []byte("\n"))
			off = i - (bytes.LastIndexByte(data[:i], '\n') + 1)
		}
	}
	text, ok := nthLine(data, p.Line)
	if !ok { // past the end, as the parser counts a mistake at the end
		p.Line = bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			p.Line++
		}
		p.Line = max(p.Line, 1)
		text, _ = nthLine(data, p.Line)
		off = -1
	}
	if off >= 0 && off <= len(text) {
		p.Column = utf8.RuneCount(text[:off]) + 1
	}
	p.Text = lineText(text)
	return p
}

// locateFault runs, over data's lines, the detectors for a message, and
// returns the first mistake found that fits what the parser said (from:
// the line it names, counted from 1), or nil.
func locateFault(data []byte, m yamlMessage, from int) *syntaxFault {
	if m.detectors == 0 {
		return nil
	}
	// The parser names the line of what it was reading when it found the
	// mistake, at or above the mistake (the very line for an exact
	// message); for an unclosed one, the end of the file.
	fits := func(f *syntaxFault) bool {
		return f != nil && f.line >= from && (!m.exact || f.line == from)
	}
	s := newYAMLScan()
	var tab, indent, colon *syntaxFault
	var d indentDetector
	n := 0
	for rest := data; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		n++
		sh := s.line(n, string(bytes.TrimSuffix(line, []byte("\r"))))
		// A finding that does not fit is no mistake of this error: the
		// detector goes on looking.
		if m.detectors&detectTab != 0 && !fits(tab) {
			tab = tabFault(n, sh)
		}
		if m.detectors&detectIndent != 0 && !fits(indent) {
			indent = d.line(n, sh)
		}
		if m.detectors&detectColon != 0 && !fits(colon) {
			colon = colonFault(n, sh)
		}
		if m.exact && n >= from || m.detectors&detectUnclosed == 0 && (fits(tab) || fits(indent) || fits(colon)) {
			break // nothing below can be the mistake, or it is found
		}
	}
	var first *syntaxFault
	if m.detectors&detectUnclosed != 0 {
		first = s.unclosedFault()
	}
	for _, f := range []*syntaxFault{tab, indent, colon} {
		if fits(f) && (first == nil || f.line < first.line) {
			first = f
		}
	}
	return first
}

// nthLine returns line n (1-based) of data, without its line break.
func nthLine(data []byte, n int) ([]byte, bool) {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return nil, false
		}
		data = data[j+1:]
	}
	if n < 1 || (len(data) == 0 && n > 1) {
		return nil, false
	}
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	return bytes.TrimSuffix(data, []byte("\r")), true
}

// lineText is a line as an excerpt may show it: at most maxTextBytes, and
// what YAML refuses (control characters, which could drive a terminal,
// and invalid UTF-8) as '?'. Tabs stay, for the caret to line up.
func lineText(b []byte) string {
	if len(b) > maxTextBytes {
		cut := maxTextBytes
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		b = b[:cut]
	}
	var out strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if !readable(r, size) {
			r = '?'
		}
		out.WriteRune(r)
		b = b[size:]
	}
	return out.String()
}

// firstUnreadable returns the offset of the first character YAML refuses,
// or -1.
func firstUnreadable(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if !readable(r, size) && r != '\n' && r != '\r' {
			return i
		}
		i += size
	}
	return -1
}

// readable reports whether YAML reads the character r, of size bytes,
// on a line: tabs and the printable characters (YAML 1.2's c-printable
// without line breaks), in valid UTF-8.
func readable(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size <= 1:
		return false
	case r == '\t' || r >= 0x20 && r <= 0x7e || r == 0x85:
		return true
	}
	return r >= 0xa0 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000
}

// indentDetector finds the first line indented to no level it could
// belong to: between the levels of the blocks around it, or deeper than a
// line that is complete.
type indentDetector struct {
	levels  []indentLevel // the blocks open, outermost first
	open    bool          // the line above leaves its value to the lines below
	openCol int           // the column of its key, or '-'
	plain   bool          // the line above ends in a plain scalar, which may go on
	stopped bool          // past a line it cannot reason about
}

// indentLevel is a block's column: a list's '-', or a mapping's keys.
type indentLevel struct {
	col int
	seq bool
}

// line reads line n, and returns the mistake if it is one.
func (d *indentDetector) line(n int, sh lineShape) *syntaxFault {
	switch {
	case d.stopped:
		return nil
	case sh.marker:
		*d = indentDetector{levels: d.levels[:0]}
		return nil
	case sh.kind != lineContent:
		return nil
	case sh.tab >= 0 || sh.deep || len(d.levels) > maxNesting:
		d.stopped = true // a tab's mistake, for the tab detector; or too deep
		return nil
	}
	ind, seq := sh.indent, len(sh.dashes) > 0
	top := len(d.levels) - 1
	if top < 0 || d.open && (ind > d.openCol || ind == d.openCol && seq && !d.levels[top].seq) {
		// The first line, or the value of the line above: a new block.
		if seq || sh.key {
			d.levels = append(d.levels, indentLevel{ind, seq})
		}
	} else if f, goesOn := d.fit(n, ind, seq, sh.key); f != nil || goesOn {
		return f
	}
	for i := 1; i < len(sh.dashes); i++ { // "- - a": a list in a list
		d.levels = append(d.levels, indentLevel{sh.dashes[i], true})
	}
	if seq && sh.key { // "- key: value": a mapping in the list item
		d.levels = append(d.levels, indentLevel{sh.node, false})
	}
	d.open, d.plain, d.openCol = sh.value == valueBelow, sh.value == valuePlain, ind
	switch {
	case sh.key:
		d.openCol = sh.node
	case seq:
		d.openCol = sh.dashes[len(sh.dashes)-1]
	}
	return nil
}

// fit closes the blocks deeper than a line indented ind, and returns a
// fault if the line belongs to none of those left; goesOn if it goes on
// with the plain scalar above.
func (d *indentDetector) fit(n, ind int, seq, key bool) (f *syntaxFault, goesOn bool) {
	k := len(d.levels)
	for k > 0 && d.levels[k-1].col > ind {
		k--
	}
	switch {
	case k == 0: // left of every block: yaml.v3 takes it as a new one
		d.levels = append(d.levels[:0], indentLevel{ind, seq})
	case d.levels[k-1].col == ind:
		d.levels = d.levels[:k]
		if k > 1 && d.levels[k-1].seq && !seq && d.levels[k-2].col == ind {
			d.levels = d.levels[:k-1] // a list written at its key's column ends
		}
		switch last := d.levels[len(d.levels)-1]; {
		case last.seq && !seq:
			return &syntaxFault{n, ind, fmt.Sprintf("this line is indented %s, as the '-' of the list above, but is not a list item", spaces(ind))}, false
		case !last.seq && seq:
			return &syntaxFault{n, ind, fmt.Sprintf("this list item is indented %s, as the fields above, which are not a list", spaces(ind))}, false
		}
	case k == len(d.levels) && d.plain && !key && !seq:
		return nil, true
	case k < len(d.levels):
		return &syntaxFault{n, ind, fmt.Sprintf("this line is indented %s, but the lines around it are indented %s", spaces(ind), d.columns())}, false
	default:
		return &syntaxFault{n, ind, fmt.Sprintf("this line is indented %s, deeper than the line above, which is complete", spaces(ind))}, false
	}
	return nil, false
}

// columns lists the levels' columns for a message: "0, 2 or 4".
func (d *indentDetector) columns() string {
	var cols []string
	for i, l := range d.levels {
		if i == 0 || l.col != d.levels[i-1].col {
			cols = append(cols, strconv.Itoa(l.col))
		}
	}
	if len(cols) == 1 {
		return cols[0]
	}
	return strings.Join(cols[:len(cols)-1], ", ") + " or " + cols[len(cols)-1]
}

func spaces(n int) string {
	if n == 1 {
		return "1 space"
	}
	return strconv.Itoa(n) + " spaces"
}
