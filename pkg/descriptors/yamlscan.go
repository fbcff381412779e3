package descriptors

import "strings"

// yaml.v3 reports a syntax error at the line of the construct it was
// reading (a flow mapping, a block list), not at the mistake, which may be
// many lines below. The detectors of this file find the mistake itself for
// the kinds people make most: a flow collection or a quote never closed, a
// tab in the indentation, a line indented to no level of the blocks around
// it, a second ': ' on a line. They do not parse YAML: one pass over the lines (yamlScan) tells the
// lines that start a node from comments and from the inside of quoted
// text, flow collections and block scalars, and each detector looks at
// those lines for its one kind of mistake.

// syntaxFault is the place of a mistake and what is wrong there.
type syntaxFault struct {
	line int    // 1-based
	off  int    // byte offset in the line
	why  string // said after the parser's message
}

// lineKind tells the lines whose indentation matters from the others.
type lineKind int

const (
	lineBlank   lineKind = iota // nothing, a comment, a directive or a document marker
	lineContent                 // starts a node of the block structure
	lineInside                  // goes on with quoted text, a flow collection or a block scalar
)

// valueKind is what a line holds after its key's ':' (or its '-').
type valueKind int

const (
	valueBelow valueKind = iota // nothing: the lines below hold the value, if any
	valuePlain                  // a plain scalar, which lines below may go on with
	valueOther                  // quoted text, a flow collection, an alias or a block scalar
)

// lineShape is what the detectors know of one line.
type lineShape struct {
	kind   lineKind
	marker bool  // a document marker: the block structure starts over
	indent int   // leading spaces
	tab    int   // byte offset of a tab among the leading blanks (or after a '-'); -1 if none
	dashes []int // byte offsets of the leading "- " indicators (reused line to line)
	node   int   // byte offset of what follows them
	key    bool  // the node is a mapping's key
	value  valueKind
	colon  int  // byte offset of a second ': ' at the block level; -1 if none
	deep   bool // more "- " than maxNesting
}

// maxNesting bounds the flow collections and the list levels of one line
// that are tracked, and so the memory a hostile file can make the
// detectors take: yaml.v3 refuses more than 10000 levels.
const maxNesting = 10000

// opener is where a flow collection or a quoted scalar starts.
type opener struct {
	line, off int
	ch        byte
}

// yamlScan is one pass over a file's lines, in order.
type yamlScan struct {
	flow     []opener // the flow collections open at this point, innermost last
	quote    *opener  // the quoted scalar open at this point, if any
	mismatch *opener  // the first flow collection closed by the other bracket
	closer   byte     // the bracket that closed it
	deep     int      // flow collections open beyond maxNesting, not tracked
	block    int      // within a block scalar: its parent's indentation; -1 otherwise
	blockIn  int      // the block scalar's indentation, once known; -1 before
	dashes   []int
}

func newYAMLScan() *yamlScan { return &yamlScan{block: -1, blockIn: -1} }

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// endsToken reports whether text[i] ends a token: a blank or the line's end.
func endsToken(text string, i int) bool { return i >= len(text) || isBlank(text[i]) }

// line reads line n (1-based), without its line break.
func (s *yamlScan) line(n int, text string) lineShape {
	blanks := len(text) - len(strings.TrimLeft(text, " \t"))
	sh := lineShape{indent: len(text) - len(strings.TrimLeft(text, " ")), tab: strings.IndexByte(text[:blanks], '\t'), colon: -1}
	if blanks == len(text) { // yaml.v3 refuses a tab first even there
		sh.tab = strings.IndexByte(text[:min(1, len(text))], '\t')
	}
	if s.block >= 0 {
		// A block scalar's text: blank lines, and lines indented as its
		// first one is (more than its parent).
		switch {
		case blanks == len(text):
			return lineShape{kind: lineBlank, tab: sh.tab}
		case s.blockIn < 0 && sh.tab < 0 && sh.indent > s.block:
			s.blockIn = sh.indent
			return lineShape{kind: lineInside, tab: -1}
		case s.blockIn >= 0 && sh.indent >= s.blockIn:
			return lineShape{kind: lineInside, tab: -1}
		}
		s.block, s.blockIn = -1, -1
	}
	if len(s.flow) > 0 || s.quote != nil {
		sh.kind = lineInside
		s.scan(n, text, 0, &sh)
		return sh
	}
	rest := text[blanks:]
	switch {
	case rest == "" || rest[0] == '#' || rest[0] == '%':
		return sh
	case blanks == 0 && (strings.HasPrefix(rest, "---") || strings.HasPrefix(rest, "...")) && endsToken(rest, 3):
		sh.marker = true // what may follow on its line is rare in a config file
		return sh
	}
	sh.kind = lineContent
	i := blanks
	s.dashes = s.dashes[:0]
	for i < len(text) && text[i] == '-' && endsToken(text, i+1) {
		if len(s.dashes) == maxNesting {
			sh.deep = true // the indentation detector gives up
		} else {
			s.dashes = append(s.dashes, i)
		}
		for i++; i < len(text) && isBlank(text[i]); i++ {
			if text[i] == '\t' && sh.tab < 0 {
				sh.tab = i // yaml.v3 refuses a tab after a '-' too
			}
		}
	}
	sh.dashes, sh.node = s.dashes, i
	s.scan(n, text, i, &sh)
	return sh
}

// scan reads text from i: quotes, brackets, comments, and at the block
// level the key's ':' and the kind of value after it.
func (s *yamlScan) scan(n int, text string, i int, sh *lineShape) {
	start := true // a node may start here
	seen := false // the value (or the node, before a ':') has started
	note := func(v valueKind) {
		if len(s.flow) == 0 && !seen {
			sh.value, seen = v, true
		}
	}
	for i < len(text) {
		if s.quote != nil {
			i = s.skipQuoted(text, i)
			start = false
			continue
		}
		c := text[i]
		if isBlank(c) {
			i++
			continue
		}
		if c == '#' && (i == 0 || isBlank(text[i-1])) {
			return
		}
		if start {
			switch c {
			case '\'', '"':
				note(valueOther)
				s.quote = &opener{n, i, c}
				i++
				continue
			case '{', '[':
				note(valueOther)
				if len(s.flow) == maxNesting {
					s.deep++
				} else {
					s.flow = append(s.flow, opener{n, i, c})
				}
				i++
				continue
			case '&', '!': // an anchor or a tag: the node follows it
				for i < len(text) && !isBlank(text[i]) {
					i++
				}
				continue
			case '|', '>':
				if len(s.flow) == 0 {
					note(valueOther)
					s.startBlock(text[i+1:], sh)
					return
				}
			case '*':
				note(valueOther)
			}
		}
		switch {
		case s.deep > 0 && (c == '}' || c == ']'):
			s.deep--
			start = false
		case len(s.flow) > 0 && (c == '}' || c == ']'):
			top := s.flow[len(s.flow)-1]
			if (top.ch == '{') != (c == '}') && s.mismatch == nil {
				s.mismatch, s.closer = &top, c
			}
			s.flow = s.flow[:len(s.flow)-1]
			start = false
		case len(s.flow) > 0 && c == ',':
			start = true
		case c == ':' && (endsToken(text, i+1) || len(s.flow) > 0 && strings.IndexByte(",[]{}", text[i+1]) >= 0):
			switch {
			case len(s.flow) > 0:
			case !sh.key:
				sh.key, sh.value, seen = true, valueBelow, false
			case sh.colon < 0:
				sh.colon = i
			}
			start = true
		default:
			if start {
				note(valuePlain)
			}
			start = false
		}
		i++
	}
}

// skipQuoted returns the offset after the end of the open quoted scalar,
// or the line's length if it goes on below.
func (s *yamlScan) skipQuoted(text string, i int) int {
	q := s.quote.ch
	for i < len(text) {
		switch c := text[i]; {
		case q == '"' && c == '\\':
			i += 2
		case c == q && q == '\'' && i+1 < len(text) && text[i+1] == '\'':
			i += 2 // '' is a quote within single quotes
		case c == q:
			s.quote = nil
			return i + 1
		default:
			i++
		}
	}
	return len(text)
}

// startBlock begins a block scalar (| or >, then its indicators). Its text
// is indented more than the node it is the value of: the key, else the
// list item, else the line.
func (s *yamlScan) startBlock(indicators string, sh *lineShape) {
	s.block, s.blockIn = sh.indent, -1
	switch {
	case sh.key:
		s.block = sh.node
	case len(sh.dashes) > 0:
		s.block = sh.dashes[len(sh.dashes)-1]
	}
	for _, c := range []byte(indicators) {
		if c >= '1' && c <= '9' {
			s.blockIn = s.block + int(c-'0') // an explicit indentation
			break
		}
		if c != '+' && c != '-' {
			break
		}
	}
}

// unclosedFault is the first flow collection closed by the other bracket,
// else the quote or the innermost flow collection still open at the end
// of the file.
func (s *yamlScan) unclosedFault() *syntaxFault {
	switch {
	case s.deep > 0:
		return nil // which of those not tracked is open is unknown
	case s.mismatch != nil:
		return &syntaxFault{s.mismatch.line, s.mismatch.off, "this '" + string(s.mismatch.ch) + "' is closed by a '" + string(s.closer) + "'"}
	case s.quote != nil:
		return &syntaxFault{s.quote.line, s.quote.off, "this quote is never closed"}
	case len(s.flow) > 0:
		o := s.flow[len(s.flow)-1]
		return &syntaxFault{o.line, o.off, "this '" + string(o.ch) + "' is never closed"}
	}
	return nil
}

// colonFault is a line with a second ': ', as in "message: Error: x": a
// plain value cannot hold one.
func colonFault(n int, sh lineShape) *syntaxFault {
	if sh.kind != lineContent || sh.colon < 0 {
		return nil
	}
	return &syntaxFault{n, sh.colon, "a second ': ' on this line: quote a value that holds one"}
}

// tabFault is a line with a tab in its indentation, outside quoted text,
// flow collections and a block scalar's text: YAML indents with spaces
// only, and yaml.v3 refuses a tab there even before a comment.
func tabFault(n int, sh lineShape) *syntaxFault {
	if sh.kind == lineInside || sh.tab < 0 {
		return nil
	}
	return &syntaxFault{n, sh.tab, "a tab indents this line: YAML indents with spaces only"}
}
