package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/spell"
)

// unknownSettings returns a warning for each RLS_ variable of environ that
// sets no flag of fs: a misspelt setting would otherwise be silently
// ignored. The closest flag's variable is suggested.
func unknownSettings(environ []string, fs *flag.FlagSet) []string {
	known := map[string]bool{}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		known[envName(f.Name)] = true
		names = append(names, envName(f.Name))
	})
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "RLS_") || known[name] || testOnlyVariables[name] {
			continue
		}
		msg := fmt.Sprintf("%s is set, but envoy-rls has no such setting: it has no effect", name)
		if near := spell.Closest(name, names); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		warnings = append(warnings, msg)
	}
	sort.Strings(warnings)
	return warnings
}

// testOnlyVariables are read by the project's tests, not by the service.
var testOnlyVariables = map[string]bool{"RLS_REQUIRE_REDIS": true, "RLS_MEASURE": true}

// settingsFlagSet is serve's flag set, for its names.
func settingsFlagSet() *flag.FlagSet {
	fs, _ := newFlagSet(io.Discard)
	return fs
}
