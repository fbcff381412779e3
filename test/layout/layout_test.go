// Package layout checks the repository's layout (the README's Development
// section): each folder of pkg is one idea, and imports only point down
// the list cmd, rls, descriptors, store, limit, leaky, window.
package layout

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/envoy-rls/envoy-rls/"

// rank is each folder's place in the list, from the top; the packages
// beside the list (metrics, certs, ...) have none.
var rank = map[string]int{
	"cmd":             0,
	"pkg/rls":         1,
	"pkg/descriptors": 2,
	"pkg/store":       3,
	"pkg/limit":       4,
	"pkg/leaky":       5,
	"pkg/window":      6,
}

// placeOf returns the folder of the list that dir (a package's path in the
// repository) belongs to, and its rank; ok is false beside the list.
func placeOf(dir string) (place string, r int, ok bool) {
	for p, r := range rank {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return p, r, true
		}
	}
	return "", 0, false
}

// TestImportsPointDown reads the imports of every non-test Go file under
// cmd and pkg and fails on one that points up the list, or sideways into
// another folder of the same rank (stores may use one another: localfirst
// runs on redis, fallback on memory).
func TestImportsPointDown(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, top := range []string{"cmd", "pkg"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			rel = filepath.ToSlash(rel)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			from, fromRank, inList := placeOf(rel)
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				dep, ok := strings.CutPrefix(p, module)
				if !ok {
					continue
				}
				checked++
				to, toRank, depInList := placeOf(dep)
				switch {
				case strings.HasPrefix(dep, "cmd/"):
					t.Errorf("%s imports %s: nothing imports a command", path, dep)
				case !inList || !depInList || from == to:
				case toRank <= fromRank:
					t.Errorf("%s imports %s: %s is not below %s", path, dep, to, from)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d imports of the module found: is the walk reading the repository?", checked)
	}
}

// TestFilesStaySmall fails on a non-test Go file under cmd, pkg or
// internal of more than 450 lines: past that, a file holds more than one job.
func TestFilesStaySmall(t *testing.T) {
	const most = 450
	root := filepath.Join("..", "..")
	files := 0
	for _, top := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			if n := strings.Count(string(b), "\n"); n > most {
				t.Errorf("%s has %d lines: split it along its seams (at most %d)", path, n, most)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 50 {
		t.Fatalf("only %d files read: is the walk reading the repository?", files)
	}
}
