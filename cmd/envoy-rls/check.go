package main

import (
	"errors"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// checkConfig validates a config file or directory: warnings and errors go
// to stderr as file:line: field: message, a summary to stdout.
func (a *app) checkConfig(args []string) int {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintln(a.stderr, "Usage: envoy-rls check-config PATH")
		return exitUsage
	}
	cfg, warnings, err := descriptors.Load(args[0])
	for _, w := range warnings {
		fmt.Fprintln(a.stderr, "warning: "+w.String())
	}
	var cfgErr *descriptors.Error
	switch {
	case errors.As(err, &cfgErr):
		for _, p := range cfgErr.Problems {
			fmt.Fprintln(a.stderr, p.String())
		}
		return exitError
	case err != nil:
		fmt.Fprintf(a.stderr, "%v\n", err)
		return exitError
	}
	limits := 0
	for _, d := range cfg.Domains() {
		limits += len(d.Rules())
	}
	fmt.Fprintf(a.stdout, "%s: valid: %d domain(s), %d limit(s) in %d file(s)\n", args[0], len(cfg.Domains()), limits, len(cfg.Files()))
	return exitOK
}
