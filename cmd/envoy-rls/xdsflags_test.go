package main

import (
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/xdsconfig"
)

// TestEnvoyproxyXDSClient: the reference's settings of its xDS client
// reach the client: node metadata, headers, message size, backoff (its
// defaults when unset).
func TestEnvoyproxyXDSClient(t *testing.T) {
	base := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "eg:18001", "USE_STATSD": "false",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}
	client := func(env map[string]string) xdsconfig.Client {
		t.Helper()
		s, err := parseFlags(nil, lookupIn(env), io.Discard, true)
		if err != nil {
			t.Fatal(err)
		}
		var c xdsconfig.Client
		s.xds.client.apply(&c)
		return c
	}
	c := client(base)
	if c.NodeMetadata != nil || c.Headers != nil || c.MaxMessageBytes != 0 ||
		c.Backoff != (xdsconfig.Backoff{Min: 10 * time.Second, Max: time.Minute, Factor: 0.5, Jitter: true}) {
		t.Errorf("the reference's defaults: %+v", c)
	}
	env := maps.Clone(base)
	env["CONFIG_GRPC_XDS_NODE_METADATA"] = "cluster=eu-1,zone=b=c,"
	env["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"] = "x-token:s3cret,Tenant:blue"
	env["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"] = "16777216"
	env["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "1s"
	env["XDS_CLIENT_BACKOFF_MAX_INTERVAL"] = "20s"
	env["XDS_CLIENT_BACKOFF_RANDOM_FACTOR"] = "3"
	env["XDS_CLIENT_BACKOFF_JITTER"] = "false"
	c = client(env)
	if len(c.NodeMetadata) != 2 || c.NodeMetadata["cluster"] != "eu-1" || c.NodeMetadata["zone"] != "b=c" {
		t.Errorf("node metadata %v", c.NodeMetadata)
	}
	if len(c.Headers) != 2 || c.Headers["x-token"] != "s3cret" || c.Headers["Tenant"] != "blue" {
		t.Errorf("headers %v", c.Headers)
	}
	if c.MaxMessageBytes != 16<<20 || c.Backoff != (xdsconfig.Backoff{Min: time.Second, Max: 20 * time.Second, Factor: 3}) {
		t.Errorf("size %d, backoff %+v", c.MaxMessageBytes, c.Backoff)
	}
	// jpillora/backoff's own defaults for zero settings, as there.
	env = maps.Clone(base)
	env["XDS_CLIENT_BACKOFF_RANDOM_FACTOR"], env["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "0", "0s"
	if c = client(env); c.Backoff.Factor != 2 || c.Backoff.Min != 100*time.Millisecond {
		t.Errorf("zero factor and interval: %+v, want 2 and 100ms", c.Backoff)
	}

	for name, value := range map[string]string{
		"CONFIG_GRPC_XDS_NODE_METADATA":             "key1:val1",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES":          "4MB",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":       "ten",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":          "half",
		"XDS_CLIENT_BACKOFF_JITTER":                 "maybe",
	} {
		env := maps.Clone(base)
		env[name] = value
		if _, err := readEnvoyproxyEnv(lookupIn(env)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming it", name, value, err)
		}
	}
}

// TestXDSClientFlags: the flags themselves, outside the reference's
// environment.
func TestXDSClientFlags(t *testing.T) {
	s, err := parseFlags([]string{"-config-xds", "x:1", "-config-xds-headers", "a:1, b : 2", "-config-xds-max-message-size", "8MiB",
		"-config-xds-backoff-jitter"}, lookupIn(nil), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	var c xdsconfig.Client
	s.xds.client.apply(&c)
	if len(c.Headers) != 2 || c.Headers["b"] != "2" || c.MaxMessageBytes != 8<<20 ||
		c.Backoff != (xdsconfig.Backoff{Min: xdsconfig.DefaultBackoffMin, Max: xdsconfig.DefaultBackoffMax, Factor: 2, Jitter: true}) {
		t.Errorf("%+v", c)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-config-xds-headers", "a:1"}, "need -config-xds"},
		{[]string{"-config-xds", "x:1", "-config-xds-headers", "grpc-timeout:1"}, "gRPC's own"},
		{[]string{"-config-xds", "x:1", "-config-xds-headers", "a b:1"}, "may hold 0-9"},
		{[]string{"-config-xds", "x:1", "-config-xds-headers", "a:caf\u00e9"}, "printable ASCII"},
		{[]string{"-config-xds", "x:1", "-config-xds-node-metadata", "=v"}, "want key=value"},
		{[]string{"-config-xds", "x:1", "-config-xds-backoff-factor", "0"}, "-config-xds-backoff-factor: must be positive"},
		{[]string{"-config-xds", "x:1", "-config-xds-backoff-initial", "0s"}, "must be positive"},
	} {
		if _, err := parseFlags(c.args, lookupIn(nil), io.Discard, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestEnvoyproxyConfigFiles: MERGE_DOMAIN_CONFIG merges, dot files are
// read unless RUNTIME_IGNOREDOTFILES=true (the reference's default), and
// FORCE_START_WITHOUT_INITIAL_CONFIG holds with files too; started on its
// own, envoy-rls merges nothing and skips dot files.
func TestEnvoyproxyConfigFiles(t *testing.T) {
	for _, c := range []struct {
		env        map[string]string
		reference  bool
		merge, dot bool
		force      bool
	}{
		{map[string]string{}, true, false, true, false},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "true", "RUNTIME_IGNOREDOTFILES": "true", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, true, true, false, true},
		{map[string]string{"RUNTIME_IGNOREDOTFILES": "false"}, true, false, true, false},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "true", "RUNTIME_IGNOREDOTFILES": "false"}, false, false, false, false},
		{map[string]string{"RLS_MERGE_DOMAINS": "true", "RLS_CONFIG_DOTFILES": "true", "RLS_FORCE_START_WITHOUT_CONFIG": "true"}, false, true, true, true},
	} {
		c.env["USE_STATSD"] = "false"
		s, err := parseFlags(nil, lookupIn(c.env), io.Discard, c.reference)
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if o := s.configOptions(); o.MergeDomains != c.merge || o.DotFiles != c.dot || s.xds.forceStart != c.force || len(s.envWarnings) > 0 {
			t.Errorf("%v (as ratelimit: %v): merge %v, dot files %v, force start %v, warnings %v; want %v, %v, %v",
				c.env, c.reference, o.MergeDomains, o.DotFiles, s.xds.forceStart, s.envWarnings, c.merge, c.dot, c.force)
		}
	}
}

func TestParsePairs(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: sorted k=v, or the error
	}{
		{"", ""},
		{"a=1", "a=1"},
		{" a = 1 ,b=2,,", "a=1 b=2"},
		{"a=1=2", "a=1=2"},
		{"a=", "a="},
		{"a", `"a": want key=value pairs, comma-separated`},
		{"=1", `"=1": want key=value pairs, comma-separated`},
	} {
		m, err := parsePairs(c.in, "=", "key=value", nil)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				kv = append(kv, k+"="+m[k])
			}
			got = strings.Join(kv, " ")
		}
		if got != c.want {
			t.Errorf("%q: %s, want %s", c.in, got, c.want)
		}
	}
}
