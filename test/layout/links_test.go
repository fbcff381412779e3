package layout

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link in README.md and docs/*.md
// names a file or folder that exists (relative to the linking file), and
// every #anchor into a Markdown file names a heading there. Links to
// http(s) addresses are not checked.
func TestDocLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md")}, docs...)
	if len(files) < 5 {
		t.Fatalf("only %d Markdown files found: is the test reading the repository?", len(files))
	}
	links := 0
	for _, file := range files {
		n, problems, err := checkLinks(file)
		if err != nil {
			t.Fatal(err)
		}
		links += n
		rel, _ := filepath.Rel(root, file)
		for _, p := range problems {
			t.Errorf("%s: %s", filepath.ToSlash(rel), p)
		}
	}
	if links < 100 {
		t.Fatalf("only %d relative links found: did the link syntax the test reads change?", links)
	}
}

// TestLinkCheckFindsBrokenLinks: the check itself reports a missing file,
// a missing heading in another file and in the same one, and takes the
// links that do resolve, GitHub's anchors for duplicate headings included.
func TestLinkCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/other.md", "# Other\n\n## `rate_limit` as a bucket\n\n## Why was a request limited?\n\n## Notes\n\n## Notes\n\n```yaml\n# in a block: not a heading\n```\n")
	write("examples/envoy/usage.yaml", "domain: x\n")
	write("README.md", strings.Join([]string{
		"# Project",
		"## Quick start",
		"[ok](docs/other.md#rate_limit-as-a-bucket) [ok](docs/other.md#why-was-a-request-limited)",
		"[ok](docs/other.md#notes-1) [ok](#quick-start) [ok](examples/envoy) ![ok](examples/envoy/usage.yaml)",
		"[external](https://example.com/missing) `[in code](missing.md)`",
		"[missing file](docs/missing.md)",
		"[missing heading](docs/other.md#no-such-heading)",
		"[missing duplicate](docs/other.md#notes-2)",
		"[not a heading](docs/other.md#in-a-block-not-a-heading)",
		"[missing here](#quick-begin)",
		"```",
		"[in a block](nowhere.md)",
		"```",
		"",
	}, "\n"))
	n, problems, err := checkLinks(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"line 6: docs/missing.md: no such file",
		"line 7: docs/other.md#no-such-heading: docs/other.md has no heading for #no-such-heading",
		"line 8: docs/other.md#notes-2: docs/other.md has no heading for #notes-2",
		"line 9: docs/other.md#in-a-block-not-a-heading: docs/other.md has no heading for #in-a-block-not-a-heading",
		"line 10: #quick-begin: README.md has no heading for #quick-begin",
	}
	if n != 11 || strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d links; problems:\n%s\nwant 11 links; problems:\n%s", n, strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}

var (
	fence    = regexp.MustCompile("(?ms)^ {0,3}(```|~~~).*?^ {0,3}(```|~~~)[ \t]*$")
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	link     = regexp.MustCompile(`\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	heading  = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$`)
	mdLink   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// checkLinks reads a Markdown file and returns how many relative links it
// has and what is wrong with those that do not resolve.
func checkLinks(file string) (links int, problems []string, err error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return 0, nil, err
	}
	// Code is not read for links; its newlines stay, for line numbers.
	body := fence.ReplaceAllStringFunc(string(text), newlinesOnly)
	body = codeSpan.ReplaceAllStringFunc(body, func(s string) string { return "code" + newlinesOnly(s) })
	anchorCache := map[string]map[string]bool{}
	for _, m := range link.FindAllStringSubmatchIndex(body, -1) {
		target := body[m[2]:m[3]]
		line := 1 + strings.Count(body[:m[0]], "\n")
		if u, err := url.Parse(target); err == nil && u.Scheme != "" {
			continue // http(s), mailto: not checked
		}
		links++
		path, anchor, _ := strings.Cut(target, "#")
		path, err := url.PathUnescape(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("line %d: %s: %v", line, target, err))
			continue
		}
		dest := file
		if path != "" {
			dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			if _, err := os.Stat(dest); err != nil {
				problems = append(problems, fmt.Sprintf("line %d: %s: no such file", line, target))
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(strings.ToLower(dest), ".md") {
			continue
		}
		anchors, ok := anchorCache[dest]
		if !ok {
			if anchors, err = headingAnchors(dest); err != nil {
				return links, problems, err
			}
			anchorCache[dest] = anchors
		}
		if !anchors[anchor] {
			name := path
			if name == "" {
				name = filepath.Base(file)
			}
			problems = append(problems, fmt.Sprintf("line %d: %s: %s has no heading for #%s", line, target, name, anchor))
		}
	}
	return links, problems, nil
}

// newlinesOnly returns the newlines of s.
func newlinesOnly(s string) string {
	return strings.Repeat("\n", strings.Count(s, "\n"))
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, spaces as hyphens, punctuation other than hyphens
// and underscores dropped, "-1", "-2"... added to repeats.
func headingAnchors(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(text), ""), -1) {
		slug := anchorOf(m[1])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors, nil
}

// anchorOf is GitHub's anchor for a heading's text.
func anchorOf(title string) string {
	title = mdLink.ReplaceAllString(title, "$1") // a link's text stays
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
