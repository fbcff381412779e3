package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The three mistakes yaml.v3 names the wrong line for: an unclosed '{' on
// line 4 (it says 3), a key indented one space too few on line 9 (it says
// 2), a tab indenting line 4 (it says 3).
const (
	unclosedBraceYAML = `domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s
  - key: path
    value: /admin/*
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	misindentedYAML = `domain: api
descriptors:
  - key: user
    leaky_bucket:
      size: 60
      drip_rate: 1s
  - key: path
    value: /admin/*
   rate_limit: {unit: minute, requests_per_unit: 100}
`
	tabIndentedYAML = "domain: api\ndescriptors:\n  - key: user\n\tleaky_bucket: {size: 60, drip_rate: 1s}\n"
)

// TestSyntaxErrorsNameTheMistakesLine: the error names the line of the
// mistake, keeps the parser's message, and shows the line with a caret
// under the mistake.
func TestSyntaxErrorsNameTheMistakesLine(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"unclosed brace", unclosedBraceYAML, "bad.yaml:4: invalid YAML: did not find expected ',' or '}' (this '{' is never closed)\n" +
			"  |     leaky_bucket: {size: 60, drip_rate: 1s\n" +
			"  |                   ^"},
		{"mis-indented key", misindentedYAML, "bad.yaml:9: invalid YAML: did not find expected '-' indicator (this line is indented 3 spaces, but the lines around it are indented 0, 2 or 4)\n" +
			"  |    rate_limit: {unit: minute, requests_per_unit: 100}\n" +
			"  |    ^"},
		{"tab indentation", tabIndentedYAML, "bad.yaml:4: invalid YAML: found a tab character that violates indentation (a tab indents this line: YAML indents with spaces only)\n" +
			"  | \tleaky_bucket: {size: 60, drip_rate: 1s}\n" +
			"  | ^"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Parse(Source{Name: "bad.yaml", Data: []byte(c.yaml)})
			var cfgErr *Error
			if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			if err.Error() != c.want {
				t.Fatalf("got:\n%s\nwant:\n%s", err, c.want)
			}
		})
	}
}

// locate parses yaml, which must be invalid, and returns where its
// syntax error is and what is wrong there, "line:column: why", or
// "line:0:" when no detector finds the mistake.
func locate(t *testing.T, yaml string) string {
	t.Helper()
	_, _, err := Parse(Source{Name: "f.yaml", Data: []byte(yaml)})
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 1 || !strings.HasPrefix(cfgErr.Problems[0].Msg, "invalid YAML: ") {
		t.Fatalf("%q: got %v, want one YAML syntax error", yaml, err)
	}
	p := cfgErr.Problems[0]
	_, why, _ := strings.Cut(p.Msg, " (")
	return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column) + ": " + strings.TrimSuffix(why, ")")
}

func TestUnclosedDetector(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"a: {b: 1\nc: 2\n", "1:4: this '{' is never closed"},
		{"a:\n  - [1, 2\n  - b\n", "2:5: this '[' is never closed"},
		{"a: [1, {b: 2}\n", "1:4: this '[' is never closed"},               // the inner one is closed
		{"a: {b: [1, 2}\n", "1:8: this '[' is closed by a '}'"},            // the first wrong bracket
		{"a: 'it''s\nb: 2\n", "1:4: this quote is never closed"},           // '' is a quote inside
		{"a: \"say \\\"hi\\\"\nb: 2\n", "1:4: this quote is never closed"}, // so is \"
		// Brackets in a comment, in quotes, in a plain value and in a
		// block scalar are none.
		{"# {\na: \"{\"\nb: it's {x\nc: |\n  {\nd: {e: 1\n", "6:4: this '{' is never closed"},
	} {
		if got := locate(t, c.yaml); got != c.want {
			t.Errorf("%q: got %q, want %q", c.yaml, got, c.want)
		}
	}
}

func TestTabDetector(t *testing.T) {
	const why = ": a tab indents this line: YAML indents with spaces only"
	for _, c := range []struct{ yaml, want string }{
		{"a:\n  - b\n\t- c\n", "3:1" + why},
		{"a:\n  b:\n  \t c: 1\n", "3:3" + why},
		{"a: 1\n\t# note\nb: 2\n", "2:1" + why}, // yaml.v3 refuses it before a comment too
		{"a: |\n  x\n\t\nb: 2\n", "3:1" + why},  // and on a blank line
		{"a:\n  - b\n  -\tc\n", "3:4" + why},    // and after a '-'
		{"- \ta\n", "1:3" + why},
		// Tabs yaml.v3 takes: in a block scalar's text, in a flow
		// collection, before a comment after a value. The mistake is
		// elsewhere: the parser's line, no finding.
		{"a: |\n  x\n  \ty\n  \t\nb: [1,\n\t2]\nc: 1 \t# c\nd: @\n", "8:0: "},
	} {
		if got := locate(t, c.yaml); got != c.want {
			t.Errorf("%q: got %q, want %q", c.yaml, got, c.want)
		}
	}
}

func TestIndentDetector(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"a:\n  b: 1\n c: 2\n", "3:2: this line is indented 1 space, but the lines around it are indented 0 or 2"},
		{"a: b\n  c: d\n", "2:3: this line is indented 2 spaces, deeper than the line above, which is complete"},
		{"l:\n  - k: a\n  v: x\n", "3:3: this line is indented 2 spaces, as the '-' of the list above, but is not a list item"},
		{"a: 1\n- b\n", "2:1: this list item is indented 0 spaces, as the fields above, which are not a list"},
		// Valid shapes on the way: a list at its key's column, a plain
		// scalar going on, block and flow values over several lines.
		{"l:\n- a\n- b\n  c\nm: |\n  x\n\n   y\nn: {a: 1,\n b: 2}\no:\n  - - p\n    - q\n  -\n    r: 1\n s: 2\n",
			"16:2: this line is indented 1 space, but the lines around it are indented 0, 2 or 4"},
	} {
		if got := locate(t, c.yaml); got != c.want {
			t.Errorf("%q: got %q, want %q", c.yaml, got, c.want)
		}
	}
}

func TestColonDetector(t *testing.T) {
	got := locate(t, "a:\n  - msg: Error: x\n")
	if want := "2:15: a second ': ' on this line: quote a value that holds one"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestSyntaxErrorFallsBackToTheParsersLine: without a detector for the
// message, the line is the parser's, counted from 1, with its text.
func TestSyntaxErrorFallsBackToTheParsersLine(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		line       int
		text       string
	}{
		{"a key without ':'", "a: b\nc\n", 2, "c"},                             // the scanner's line, from 1
		{"content after a flow", "a:\n  b: [1] x\n", 2, "  b: [1] x"},          // the parser's, from 0
		{"a control character", "a: 1\nb: \"x\x01\"\n", 2, "b: \"x?\""},        // shown as '?'
		{"invalid UTF-8", "a: 1\nb: \"x\xff\"\n", 2, "b: \"x?\""},              // shown as '?'
		{"first line", "[\n", 1, "["},                                          // no line named at all
		{"beyond the end", "a: 'x\n", 1, "a: 'x"},                              // the quote, not past the end
		{"one line, no break", "a: b: c", 1, "a: b: c"},                        // the file's only line
		{"a long line", "a: [" + strings.Repeat("x, ", 400) + "\n", 1, "a: ["}, // clipped
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Parse(Source{Name: "f.yaml", Data: []byte(c.yaml)})
			var cfgErr *Error
			if !errors.As(err, &cfgErr) || len(cfgErr.Problems) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			p := cfgErr.Problems[0]
			if p.Line != c.line || !strings.HasPrefix(p.Text, c.text) || len(p.Text) > maxTextBytes {
				t.Fatalf("got line %d, text %q; want line %d, text %q", p.Line, p.Text, c.line, c.text)
			}
			if x := p.Excerpt(); strings.ContainsFunc(x, func(r rune) bool { return r != '\t' && r != '\n' && !readable(r, 1) }) || len(x) > 2*(excerptWidth+10)*4 {
				t.Fatalf("excerpt %q holds control characters or is too long", x)
			}
		})
	}
}

// TestSyntaxErrorLineIsInTheFile: a line the parser counts past the end
// (it may name the line after the last) is the last.
func TestSyntaxErrorLineIsInTheFile(t *testing.T) {
	p := yamlProblem("f.yaml", []byte("a: 1\nb: 2\n"), errors.New("yaml: line 2: did not find expected <document start>"))
	if p.Line != 2 || p.Text != "b: 2" || p.Column != 0 {
		t.Fatalf("got %+v, want line 2 and its text", p)
	}
}

func TestExcerptOfALongLine(t *testing.T) {
	p := Problem{Text: strings.Repeat("a", 150) + "{" + strings.Repeat("b", 150), Column: 151}
	lines := strings.Split(p.Excerpt(), "\n")
	if len(lines) != 2 || strings.Index(lines[1], "^") != strings.Index(lines[0], "{") || !strings.HasPrefix(lines[0], "  | ...") || !strings.HasSuffix(lines[0], "...") {
		t.Fatalf("got:\n%s", p.Excerpt())
	}
	if p := (Problem{Text: "short", Column: 40}); p.Excerpt() != "  | short" {
		t.Fatalf("a column past the text: got %q, want the text without a caret", p.Excerpt())
	}
}

// TestProblemsAreInLineOrder: a file's problems are listed by line, though
// the top-level fields are read before the descriptors; files keep their
// order.
func TestProblemsAreInLineOrder(t *testing.T) {
	_, _, err := parse(t, "b.yaml", `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: -1, drip_rate: 1s}
    descriptors:
      - key: ""
  - key: path
    rate_limit: {unit: fortnight, requests_per_unit: 1}
match: sideways
charge: sometimes
`, "a.yaml", "domain: web\nmatch: no\ndescriptors: [{key: \"\"}]\n")
	var cfgErr *Error
	if !errors.As(err, &cfgErr) {
		t.Fatalf("got %v, want a config error", err)
	}
	var got []string
	for _, p := range cfgErr.Problems {
		got = append(got, p.File+":"+strconv.Itoa(p.Line)+":"+strconv.Itoa(p.Column))
	}
	want := "b.yaml:4:26 b.yaml:6:14 b.yaml:8:24 b.yaml:9:8 b.yaml:10:9 a.yaml:2:8 a.yaml:3:21"
	if strings.Join(got, " ") != want {
		t.Fatalf("got  %s\nwant %s\n%v", strings.Join(got, " "), want, err)
	}
}

// TestDetectorsFindNothingInValidFiles: run on files yaml.v3 reads, the
// detectors find no mistake, so none is blamed for another's.
func TestDetectorsFindNothingInValidFiles(t *testing.T) {
	files, _ := filepath.Glob("../../config/*.yaml")
	more, _ := filepath.Glob("../../cmd/envoy-rls/testdata/envoyproxy/*.yaml")
	inputs := append([]string{validConfig, windowsConfig}, fuzzSeeds[:6]...)
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(data))
	}
	all := yamlMessage{detectors: detectUnclosed | detectTab | detectIndent | detectColon}
	for _, in := range inputs {
		if f := locateFault([]byte(in), all, 0); f != nil {
			t.Errorf("a mistake found on line %d (%s) of a valid file:\n%s", f.line, f.why, in)
		}
	}
}

// FuzzYAMLProblem: for any file and any message, the place found is a
// line of the file, and the excerpt shows what is there.
func FuzzYAMLProblem(f *testing.F) {
	for _, s := range append([]string{unclosedBraceYAML, misindentedYAML, tabIndentedYAML}, fuzzSeeds...) {
		f.Add([]byte(s), 2)
	}
	msgs := make([]string, 0, len(yamlMessages)+1)
	for m := range yamlMessages {
		msgs = append(msgs, m)
	}
	f.Fuzz(func(t *testing.T, data []byte, named int) {
		lines := max(1, strings.Count(string(data), "\n")+1)
		for _, m := range append(msgs, "control characters are not allowed") {
			err := errors.New("yaml: line " + strconv.Itoa(max(named, 0)%(lines+2)) + ": " + m)
			p := yamlProblem("f.yaml", data, err)
			if p.Line < 1 || p.Line > lines || p.Column < 0 || len(p.Text) > maxTextBytes+3 {
				t.Fatalf("%s: got line %d column %d of %d lines", m, p.Line, p.Column, lines)
			}
			p.Excerpt()
		}
	})
}
