package examples

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestDocumentedConfigsLoad: every config file the README and the docs
// show (a YAML block that starts with its domain) loads without an error.
func TestDocumentedConfigsLoad(t *testing.T) {
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	found := 0
	for _, doc := range []string{"../README.md", "../docs/configuration.md", "../docs/envoy-gateway.md", "../docs/migration.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllStringSubmatch(string(text), -1) {
			yaml := m[1]
			if !strings.HasPrefix(yaml, "domain:") {
				continue // a fragment, or another kind of file
			}
			found++
			if _, _, err := descriptors.Parse(descriptors.Source{Name: doc, Data: []byte(yaml)}); err != nil {
				t.Errorf("a config in %s does not load:\n%v\n%s", doc, err, yaml)
			}
		}
	}
	if found < 4 {
		t.Fatalf("%d documented configs found: the docs' layout changed", found)
	}
}
