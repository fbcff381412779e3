// Command envoy-rls is the Envoy rate-limit service: leaky buckets,
// hierarchical descriptors, all-or-nothing charging.
//
//	envoy-rls [serve] [flags]       run the service (serve is the default)
//	envoy-rls check-config PATH     validate a config file or directory
//	envoy-rls explain DOMAIN k=v... walk descriptors through the config
//	envoy-rls healthcheck           probe the local server's gRPC health
//	envoy-rls version               print the version (also -version, --version)
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

func main() {
	a := &app{name: filepath.Base(os.Args[0]), stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv, environ: os.Environ, listen: net.Listen}
	os.Exit(a.run(context.Background(), os.Args[1:]))
}

// app is one run of the command, with its outside world made explicit so
// tests can run it in-process.
type app struct {
	// name is the program's name: as ratelimit (envoyproxy/ratelimit's
	// binary, which images made for it run), serve reads that service's
	// environment variables.
	name           string
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	environ        func() []string // nil: no variables to check
	listen         func(network, addr string) (net.Listener, error)
	// ready, if set, is called once the service listens and its health
	// status is known.
	ready func(listenAddrs)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // invalid config, or the service failed
	exitUsage = 2 // bad command line
)

func (a *app) run(ctx context.Context, args []string) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "serve" && len(args) > 0 {
		// What users of any command line try first: the commands, not only
		// serve's flags, and the version the way most tools print it.
		switch args[0] {
		case "-h", "-help", "--help":
			cmd = "help"
		case "-version", "--version":
			cmd = "version"
		}
	}
	switch cmd {
	case "serve":
		return a.serve(ctx, args)
	case "check-config":
		return a.checkConfig(args)
	case "explain":
		return a.explain(args)
	case "healthcheck":
		return a.healthcheck(args)
	case "version":
		fmt.Fprintln(a.stdout, "envoy-rls", version())
		return exitOK
	case "help":
		a.usage(a.stdout)
		return exitOK
	default:
		return a.unknownCommand(cmd)
	}
}

func (a *app) usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  envoy-rls [serve] [flags]       run the rate-limit service (serve is the default)
  envoy-rls check-config PATH     validate a config file or directory; exit 1 if invalid
  envoy-rls explain [-config PATH] DOMAIN key=value[,key=value...]...
                                  show each descriptor's walk through the config: levels, limits, bucket keys
  envoy-rls healthcheck [flags]   ask the local server's gRPC health: exit 0 if SERVING, 1 if not
  envoy-rls version               print the version (also -version, --version)

Flags of serve (each also read from RLS_<NAME>, e.g. RLS_GRPC_ADDR; a flag beats its variable):
`)
	fs, _ := newFlagSet(io.Discard)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// version returns the module version and VCS revision the binary was built
// from, as far as Go recorded them.
func version() string {
	v, commit := buildVersion, buildCommit
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && commit == "" {
				commit = s.Value
			}
		}
	}
	if v == "" {
		v = "(unknown)"
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit != "" {
		v += " " + commit
	}
	return v
}

// buildVersion and buildCommit are stamped by the build where the source
// has no .git for Go to read (the image: go build -ldflags "-X
// main.buildVersion=v1.2.3 -X main.buildCommit=abcdef..."); empty, the
// module version and the VCS revision Go recorded are used.
var buildVersion, buildCommit string
