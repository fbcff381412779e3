package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMistypedNamesAreSuggested: a mistyped flag or command gets the
// mistake, the name meant and where the flags are, in a few lines, not
// the whole usage; exit 2.
func TestMistypedNamesAreSuggested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-grcp-addr", ":9000"}, "envoy-rls: flag provided but not defined: -grcp-addr\n" +
			"did you mean -grpc-addr?\n" +
			"run 'envoy-rls -h' for every flag\n"},
		{[]string{"serve", "--redis-ulr", "redis://r"}, "envoy-rls: flag provided but not defined: -redis-ulr\n" +
			"did you mean -redis-url?\n" +
			"run 'envoy-rls -h' for every flag\n"},
		{[]string{"chek-config", "config"}, "envoy-rls: unknown command \"chek-config\"\n" +
			"did you mean check-config?\n" +
			"run 'envoy-rls -h' for the commands and their flags\n"},
		{[]string{"config", "x.yaml"}, "envoy-rls: unknown command \"config\"\n" +
			"did you mean -config?\n" +
			"run 'envoy-rls -h' for the commands and their flags\n"},
		{[]string{"frobnicate"}, "envoy-rls: unknown command \"frobnicate\"\n" +
			"run 'envoy-rls -h' for the commands and their flags\n"},
		{[]string{"check-config", "-chrage", "always", "config"}, "envoy-rls check-config: flag provided but not defined: -chrage\n" +
			"did you mean -charge?\n" +
			"run 'envoy-rls check-config -h' for every flag\n"},
		{[]string{"explain", "api", "-confg", "config", "user=a"}, "envoy-rls explain: flag provided but not defined: -confg\n" +
			"did you mean -config?\n" +
			"run 'envoy-rls explain -h' for every flag\n"},
		{[]string{"healthcheck", "-tiemout", "1s"}, "envoy-rls healthcheck: flag provided but not defined: -tiemout\n" +
			"did you mean -timeout?\n" +
			"run 'envoy-rls healthcheck -h' for every flag\n"},
		{[]string{"-no-such-flag"}, "envoy-rls: flag provided but not defined: -no-such-flag\n" +
			"run 'envoy-rls -h' for every flag\n"},
	} {
		a, stdout, stderr := testApp(nil)
		code := a.run(context.Background(), c.args)
		if code != exitUsage || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and:\n%s", c.args, code, stderr, exitUsage, c.want)
		}
		if n := strings.Count(stderr.String(), "\n"); n > 10 {
			t.Errorf("%v: %d lines, want at most 10", c.args, n)
		}
	}
}

// TestWrongFlagValuesAreShort: a flag without its value, or with one it
// cannot take, gets the flag package's message and where the flags are.
func TestWrongFlagValuesAreShort(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-grpc-addr"}, "envoy-rls: flag needs an argument: -grpc-addr\n" +
			"run 'envoy-rls -h' for every flag\n"},
		{[]string{"-sync-interval", "abc"}, "envoy-rls: invalid value \"abc\" for flag -sync-interval: parse error\n" +
			"run 'envoy-rls -h' for every flag\n"},
		{[]string{"-store", "etcd"}, "envoy-rls: invalid value \"etcd\" for flag -store: want memory, redis or memcached\n" +
			"run 'envoy-rls -h' for every flag\n"},
		{[]string{"-admin-addr", "", "-pprof"}, "envoy-rls: -pprof serves on the admin address: it needs -admin-addr\n" +
			"run 'envoy-rls -h' for every flag\n"},
		{[]string{"check-config", "-match", "some", "config"}, "envoy-rls check-config: invalid value \"some\" for flag -match: want all or leaf\n" +
			"run 'envoy-rls check-config -h' for every flag\n"},
		{[]string{"healthcheck", "-timeout", "soon"}, "envoy-rls healthcheck: invalid value \"soon\" for flag -timeout: parse error\n" +
			"run 'envoy-rls healthcheck -h' for every flag\n"},
	} {
		a, _, stderr := testApp(nil)
		if code := a.run(context.Background(), c.args); code != exitUsage || stderr.String() != c.want {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and:\n%s", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

// TestHelpStillPrintsEveryFlag: -h, -help and --help print the full usage,
// of serve or of the command, and exit 0.
func TestHelpStillPrintsEveryFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // in the output, stdout and stderr together
	}{
		{[]string{"-h"}, []string{"Usage:", "check-config PATH", "-grpc-addr", "-redis-url", "-sync-interval"}},
		{[]string{"--help"}, []string{"Usage:", "-grpc-addr", "-redis-url", "-sync-interval"}},
		{[]string{"-config", "x", "-h"}, []string{"-grpc-addr", "-redis-url", "-sync-interval"}},
		{[]string{"check-config", "-h"}, []string{"Usage: envoy-rls check-config", "-charge", "-match", "-rate-limit-algorithm"}},
		{[]string{"explain", "-help"}, []string{"Usage: envoy-rls explain", "-admin", "-config", "-o"}},
		{[]string{"healthcheck", "--help"}, []string{"-grpc-addr", "-service", "-timeout", "-tls"}},
	} {
		a, stdout, stderr := testApp(nil)
		code := a.run(context.Background(), c.args)
		out := stdout.String() + stderr.String()
		if code != exitOK {
			t.Errorf("%v: exit %d, want 0:\n%s", c.args, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the usage lacks %q:\n%s", c.args, w, out)
			}
		}
		if strings.Contains(out, "did you mean") || strings.Contains(out, "for every flag") {
			t.Errorf("%v: help reported as a mistake:\n%s", c.args, out)
		}
	}
}

// TestCheckConfigShowsTheMistake: check-config prints a YAML syntax error
// at the mistake's line, with the line and a caret below it, and a file's
// problems in line order.
func TestCheckConfigShowsTheMistake(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"brace.yaml", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: 60, drip_rate: 1s\n  - key: path\n",
			"brace.yaml:4: invalid YAML: did not find expected ',' or '}' (this '{' is never closed)\n" +
				"  |     leaky_bucket: {size: 60, drip_rate: 1s\n" +
				"  |                   ^\n"},
		{"indent.yaml", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket:\n      size: 60\n      drip_rate: 1s\n  - key: path\n    value: /admin/*\n   rate_limit: {unit: minute, requests_per_unit: 100}\n",
			"indent.yaml:9: invalid YAML: did not find expected '-' indicator (this line is indented 3 spaces, but the lines around it are indented 0, 2 or 4)\n" +
				"  |    rate_limit: {unit: minute, requests_per_unit: 100}\n" +
				"  |    ^\n"},
		{"tab.yaml", "domain: api\ndescriptors:\n  - key: user\n\tleaky_bucket: {size: 60, drip_rate: 1s}\n",
			"tab.yaml:4: invalid YAML: found a tab character that violates indentation (a tab indents this line: YAML indents with spaces only)\n" +
				"  | \tleaky_bucket: {size: 60, drip_rate: 1s}\n" +
				"  | ^\n"},
		{"order.yaml", "domain: api\ndescriptors:\n  - key: user\n    leaky_bucket: {size: -1, drip_rate: 1s}\n  - key: \"\"\nmatch: sideways\n",
			"order.yaml:4: descriptors[0].leaky_bucket.size: must be between 0 and 1099511627776, got -1\n" +
				"order.yaml:5: descriptors[1].key: must not be empty\n" +
				"order.yaml:6: match: \"sideways\": want all (every level on the path) or leaf (the deepest, as envoyproxy/ratelimit)\n"},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		a, _, stderr := testApp(nil)
		if code := a.run(context.Background(), []string{"check-config", path}); code != exitError {
			t.Errorf("%s: exit %d, want %d", c.name, code, exitError)
		}
		if got := strings.ReplaceAll(stderr.String(), dir+string(filepath.Separator), ""); got != c.want {
			t.Errorf("%s: got:\n%s\nwant:\n%s", c.name, got, c.want)
		}
	}
}

// TestSuggestedCommandsExist: every name a mistyped command may be
// corrected to is a command.
func TestSuggestedCommandsExist(t *testing.T) {
	for _, name := range commands {
		a, _, stderr := testApp(nil)
		a.run(context.Background(), []string{name, "-h"})
		if strings.Contains(stderr.String(), "unknown command") {
			t.Errorf("%s is suggested, but is no command:\n%s", name, stderr)
		}
	}
}
