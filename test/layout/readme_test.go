package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeTreeMatchesCode: every path the README's Development tree
// names exists, and every Go package under cmd, pkg, internal and test is
// named there.
func TestReadmeTreeMatchesCode(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Development\n")
	_, tree, ok2 := strings.Cut(section, "```\n")
	tree, _, ok3 := strings.Cut(tree, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no Development section with a tree in a code block")
	}
	named := map[string]bool{}
	for _, line := range strings.Split(tree, "\n") {
		if line == "" || line[0] == ' ' {
			continue // a blank line, or a description going on
		}
		path := strings.TrimSuffix(strings.Fields(line)[0], "/")
		named[path] = true
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			t.Errorf("the README's tree names %s, which does not exist", path)
		}
	}
	packages := 0
	for _, top := range []string{"cmd", "pkg", "internal", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			gofiles, _ := filepath.Glob(filepath.Join(path, "*.go"))
			if len(gofiles) == 0 {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			packages++
			if !named[rel] {
				t.Errorf("package %s is not in the README's tree", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if packages < 20 {
		t.Fatalf("only %d packages found: is the walk reading the repository?", packages)
	}
}

// TestReadmeIsShortEnoughToStartFrom: the README stays what a newcomer
// needs to decide and start (depth goes to docs/): at most 400 lines, the
// Quick start in the first 60.
func TestReadmeIsShortEnoughToStartFrom(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(readme), "\n"), "\n")
	if len(lines) > 400 {
		t.Errorf("README.md has %d lines, at most 400: move depth to docs/", len(lines))
	}
	quick := -1
	for i, l := range lines {
		if l == "## Quick start" {
			quick = i + 1
			break
		}
	}
	if quick < 0 || quick > 60 {
		t.Errorf("README.md's \"## Quick start\" is at line %d, want within the first 60", quick)
	}
}
