package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestConfigErrorLogShowsTheLine: a syntax error logged at start or reload
// carries the line's text and caret, as check-config prints them.
func TestConfigErrorLogShowsTheLine(t *testing.T) {
	_, _, err := descriptors.Parse(descriptors.Source{Name: "bad.yaml", Data: []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1\n")})
	if err == nil {
		t.Fatal("the config parsed")
	}
	var b bytes.Buffer
	logConfigError(slog.New(slog.NewTextHandler(&b, nil)), err)
	out := b.String()
	if !strings.Contains(out, "bad.yaml:") || !strings.Contains(out, "at=") || !strings.Contains(out, "^") {
		t.Errorf("the log has no file, line text and caret:\n%s", out)
	}
}
