package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestUnknownSettingsWarn(t *testing.T) {
	got := unknownSettings([]string{
		"RLS_REDIS_URL=redis://r:6379", // a setting
		"RLS_REDIS_ULR=redis://r:6379", // misspelt
		"RLS_STORAGE=redis",            // nothing near
		"RLS_REQUIRE_REDIS=1",          // the tests'
		"REDIS_URL=r:6379",             // not ours
		"RLS_LOG_LEVEL",                // no '=': still a name
	}, settingsFlagSet())
	want := []string{
		"RLS_REDIS_ULR is set, but envoy-rls has no such setting: it has no effect (did you mean RLS_REDIS_URL?)",
		"RLS_STORAGE is set, but envoy-rls has no such setting: it has no effect (did you mean RLS_STORE?)",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestServeWarnsOfUnknownSettings: serve logs the warning at start.
func TestServeWarnsOfUnknownSettings(t *testing.T) {
	a, _, stderr := testApp(map[string]string{"RLS_REDIS_ULR": "redis://r:6379"})
	ctx, cancel := context.WithCancel(context.Background())
	a.ready = func(listenAddrs) { cancel() }
	code := a.run(ctx, []string{"-config", "../../config", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-admin-addr", ""})
	if code != exitOK || !strings.Contains(stderr.String(), "RLS_REDIS_ULR is set, but envoy-rls has no such setting") {
		t.Fatalf("exit %d, log:\n%s", code, stderr)
	}
}

// TestEveryFlagIsDocumented: docs/operations.md names every flag of serve.
func TestEveryFlagIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	settingsFlagSet().VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(doc), "`-"+f.Name+"`") {
			t.Errorf("-%s is not in docs/operations.md", f.Name)
		}
	})
}
