package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// checkConfig validates a config file or directory: warnings and errors go
// to stderr as file:line: field: message (a syntax error's followed by its
// line and a caret), a summary to stdout.
//
// It reads -rate-limit-algorithm, -charge, -match, -merge-domains and
// -config-dotfiles (or their RLS_ variables) as serve does, since what a
// file means depends on them.
func (a *app) checkConfig(args []string) int {
	fs := flag.NewFlagSet("envoy-rls check-config", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cf := newConfigFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(a.stderr, "Usage: envoy-rls check-config [-rate-limit-algorithm NAME] [-charge admitted|always] [-match all|leaf] [-merge-domains] [-config-dotfiles] PATH")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return a.flagsFailed("check-config", err)
	}
	if err := applyEnv(fs, a.lookupEnv); err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls check-config: %v\n", err)
		return exitUsage
	}
	args = fs.Args()
	if len(args) != 1 || args[0] == "" {
		fs.Usage()
		return exitUsage
	}
	cfg, warnings, err := cf.options().Load(args[0])
	for _, w := range warnings {
		fmt.Fprintln(a.stderr, "warning: "+w.String())
	}
	var cfgErr *descriptors.Error
	switch {
	case errors.As(err, &cfgErr):
		for _, p := range cfgErr.Problems {
			printProblem(a.stderr, p)
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

// printProblem prints a config problem as file:line: field: message, and
// for a syntax error the line's text and a caret under the mistake, on
// the lines below.
func printProblem(w io.Writer, p descriptors.Problem) {
	fmt.Fprintln(w, p.Detail())
}
