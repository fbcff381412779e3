package main

import (
	"io"
	"strings"
	"testing"
)

// TestEnvoyproxyDogStatsD: USE_DOG_STATSD, its mogrifiers and EXTRA_TAGS
// set the DogStatsD flags, the mogrifiers behaving as the reference's
// tests state.
func TestEnvoyproxyDogStatsD(t *testing.T) {
	const pattern = `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`
	env := map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379",
		"USE_STATSD": "false", "USE_DOG_STATSD": "true", "STATSD_HOST": "datadog", "STATSD_PORT": "8126",
		"EXTRA_TAGS":                            "version:1.2,team:edge",
		"USE_DOG_STATSD_MOGRIFIERS":             "specific,WILDCARD",
		"DOG_STATSD_MOGRIFIER_SPECIFIC_PATTERN": `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$`,
		"DOG_STATSD_MOGRIFIER_SPECIFIC_NAME":    "custom.foo",
		"DOG_STATSD_MOGRIFIER_SPECIFIC_TAGS":    "domain:$1,descriptor:$2",
		"DOG_STATSD_MOGRIFIER_WILDCARD_PATTERN": pattern,
		"DOG_STATSD_MOGRIFIER_WILDCARD_NAME":    "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_WILDCARD_TAGS":    "domain:$1,descriptor:$5",
	}
	s, err := parseFlags(nil, lookupIn(env), io.Discard, true)
	if err != nil {
		t.Fatal(err)
	}
	st := s.statsd
	if st.addr != "datadog:8126" || st.protocol.String() != "udp" || !st.dogStatsD || st.tags.String() != "team:edge,version:1_2" || len(s.envWarnings) > 0 {
		t.Fatalf("statsd settings: %+v, warnings %v", st, s.envWarnings)
	}
	for in, want := range map[string]string{
		"ratelimit.service.rate_limit.mongo_cps.database_users.foo":          "custom.foo domain:mongo_cps,descriptor:database_users",
		"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit": "ratelimit.service.rate_limit.within_limit domain:mongo_cps,descriptor:$5",
		"some.unmatched.metric": "some.unmatched.metric ",
	} {
		name, tags := st.mogrifiers.list.Apply(in)
		if got := name + " " + strings.Join(tags, ","); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

// TestEnvoyproxyDogStatsDRefusals: what the reference refuses, and what
// it reads without effect.
func TestEnvoyproxyDogStatsDRefusals(t *testing.T) {
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}
	with := func(kv ...string) map[string]string {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{with("USE_DOG_STATSD", "true"), "USE_DOG_STATSD: needs USE_STATSD=false"},
		{with("USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "TAG"), "DOG_STATSD_MOGRIFIER_TAG_PATTERN"},
		{with("USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "TAG",
			"DOG_STATSD_MOGRIFIER_TAG_PATTERN", "^a$", "DOG_STATSD_MOGRIFIER_TAG_NAME", "b", "DOG_STATSD_MOGRIFIER_TAG_TAGS", ":5"), "no key"},
		{with("USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "TAG",
			"DOG_STATSD_MOGRIFIER_TAG_PATTERN", "^a$", "DOG_STATSD_MOGRIFIER_TAG_TAGS", "domain:$1"), "no name"},
		{with("EXTRA_TAGS", "team"), "EXTRA_TAGS: \"team\": want key:value"},
		{with("EXTRA_TAGS", "url:http://x"), "EXTRA_TAGS: \"url:http://x\": want key:value"},
	} {
		if _, err := readEnvoyproxyEnv(lookupIn(c.env)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.env, err, c.want)
		}
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{with("EXTRA_TAGS", "team:,zone:eu"), "EXTRA_TAGS: \"team:\": a tag without a key or a value is not sent"},
		{with("USE_DOG_STATSD_MOGRIFIERS", "TAG"), "USE_DOG_STATSD_MOGRIFIERS: not read without USE_DOG_STATSD=true"},
		{with("USE_STATSD", "false", "USE_PROMETHEUS", "true", "EXTRA_TAGS", "team:edge"), "EXTRA_TAGS: not added to the Prometheus metrics"},
		{with("GRPC_UDS", "/run/rl.sock", "GRPC_PORT", "9000"), "GRPC_HOST: GRPC_HOST and GRPC_PORT are not read with GRPC_UDS"},
		{with("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c", "GRPC_SERVER_TLS_KEY", "k", "GRPC_CLIENT_TLS_SAN", "envoy"),
			"GRPC_CLIENT_TLS_SAN: not checked without GRPC_CLIENT_TLS_CACERT"},
	} {
		ref, err := readEnvoyproxyEnv(lookupIn(c.env))
		if err != nil || !strings.Contains(strings.Join(ref.warnings, "\n"), c.want) {
			t.Errorf("%v: %v, warnings %q, want one containing %q", c.env, err, ref.warnings, c.want)
		}
	}
	// Plain StatsD: the tags go on the names, as the reference's library
	// puts them.
	ref, err := readEnvoyproxyEnv(lookupIn(with("EXTRA_TAGS", "zone:eu,team:edge,zone:us")))
	if err != nil || ref.flags["statsd-tags"] != "team:edge,zone:us" || ref.flags["statsd-dogstatsd"] != "" {
		t.Errorf("EXTRA_TAGS with USE_STATSD: %v, %v", ref.flags, err)
	}
	// GRPC_UDS and GRPC_CLIENT_TLS_SAN.
	ref, err = readEnvoyproxyEnv(lookupIn(with("GRPC_UDS", "/run/rl.sock", "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c",
		"GRPC_SERVER_TLS_KEY", "k", "GRPC_CLIENT_TLS_CACERT", "ca", "GRPC_CLIENT_TLS_SAN", "envoy.edge")))
	if err != nil || ref.flags["grpc-addr"] != "unix:///run/rl.sock" || ref.flags["grpc-tls-client-san"] != "envoy.edge" || len(ref.warnings) > 0 {
		t.Errorf("GRPC_UDS and GRPC_CLIENT_TLS_SAN: %v, %v, warnings %v", ref.flags, err, ref.warnings)
	}
}

// TestDogStatsDFlags: the flags on their own, outside the reference's
// environment.
func TestDogStatsDFlags(t *testing.T) {
	s, err := parseFlags([]string{"-statsd-addr", "dd:8125", "-statsd-dogstatsd", "-statsd-tags", "team:edge",
		"-statsd-mogrifiers", "- pattern: '^ratelimit\\.(.*)$'\n  name: custom.$1\n  tags: was:$0\n"}, lookupIn(nil), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.statsd.protocol.String() != "udp" {
		t.Errorf("DogStatsD's protocol: %s, want udp", s.statsd.protocol.String())
	}
	if name, tags := s.statsd.mogrifiers.list.Apply("ratelimit.x"); name != "custom.x" || strings.Join(tags, ",") != "was:ratelimit.x" {
		t.Errorf("the mogrifier: %s %v", name, tags)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-statsd-dogstatsd"}, "-statsd-dogstatsd: needs -statsd-addr"},
		{[]string{"-statsd-tags", "team:edge"}, "-statsd-tags: needs -statsd-addr"},
		{[]string{"-statsd-addr", "dd:8125", "-statsd-tags", "team"}, "want key:value"},
		{[]string{"-statsd-addr", "dd:8125", "-statsd-mogrifiers", "[{pattern: a, name: b}]"}, "-statsd-mogrifiers: needs -statsd-dogstatsd"},
		{[]string{"-statsd-addr", "dd:8125", "-statsd-dogstatsd", "-statsd-protocol", "tcp"}, "DogStatsD is sent over udp"},
		{[]string{"-statsd-addr", "dd:8125", "-statsd-dogstatsd", "-statsd-mogrifiers", "[{pattern: a, nam: b}]"}, "field nam not found"},
		{[]string{"-statsd-addr", "dd:8125", "-statsd-dogstatsd", "-statsd-mogrifiers", "[{pattern: a, name: b}, {pattern: '(', name: c}]"}, "mogrifier 2: pattern"},
	} {
		if _, err := parseFlags(c.args, lookupIn(nil), io.Discard, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
