package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/spell"
)

// commands are the command names, for the one meant when a name is not.
var commands = []string{"serve", "check-config", "explain", "healthcheck", "version", "help"}

// cmdLineError is a mistake on the command line, with the name the user
// probably meant ("-grpc-addr", "check-config"), if one is near.
type cmdLineError struct {
	err  error
	near string
}

func (e *cmdLineError) Error() string { return e.err.Error() }
func (e *cmdLineError) Unwrap() error { return e.err }

// parseArgs parses args into fs. On a mistake, the flag package prints
// its message and then every flag, about 150 lines for serve, in which the
// message is lost: here fs prints nothing then, and the error returned
// names the flag meant for an unknown one; the caller reports it in a few
// lines (usageError). -h and -help still print fs's usage, and return
// flag.ErrHelp.
func parseArgs(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return err
	}
	return &cmdLineError{err: err, near: nearFlag(fs, err)}
}

// undefinedFlag starts the flag package's message for an unknown flag, as
// it has been since Go 1.0; it has no error type to tell it by.
const undefinedFlag = "flag provided but not defined: -"

// nearFlag returns the flag of fs an unknown flag is a misspelling of, as
// "-name", or "".
func nearFlag(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), undefinedFlag)
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near := spell.Closest(name, names); near != "" {
		return "-" + near
	}
	return ""
}

// flagsFailed answers a parseArgs error of a command: exit 0 after -h,
// which printed the usage asked for; else the mistake, reported briefly.
func (a *app) flagsFailed(cmd string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return a.usageError(cmd, err)
}

// usageError reports a mistake on the command line of cmd ("" for serve's
// flags, given without the command's name) in three lines at most: the
// mistake, the name meant if one is near, and where every flag is listed.
func (a *app) usageError(cmd string, err error) int {
	prog := "envoy-rls"
	if cmd != "" {
		prog += " " + cmd
	}
	fmt.Fprintf(a.stderr, "%s: %v\n", prog, err)
	var ce *cmdLineError
	if errors.As(err, &ce) && ce.near != "" {
		fmt.Fprintf(a.stderr, "did you mean %s?\n", ce.near)
	}
	fmt.Fprintf(a.stderr, "run '%s -h' for every flag\n", prog)
	return exitUsage
}

// unknownCommand reports a command name that is none: the command meant
// if one is near, or serve's flag of that name (-config written config).
func (a *app) unknownCommand(name string) int {
	fmt.Fprintf(a.stderr, "envoy-rls: unknown command %q\n", name)
	near := spell.Closest(name, commands)
	if near == "" && settingsFlagSet().Lookup(name) != nil {
		near = "-" + name
	}
	if near != "" {
		fmt.Fprintf(a.stderr, "did you mean %s?\n", near)
	}
	fmt.Fprintln(a.stderr, "run 'envoy-rls -h' for the commands and their flags")
	return exitUsage
}
