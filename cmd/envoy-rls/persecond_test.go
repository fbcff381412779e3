package main

import (
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestEnvoyproxyPerSecond: REDIS_PERSECOND=true sets the -redis-persecond-*
// flags from the REDIS_PERSECOND_* variables as REDIS_* set the first
// Redis's; without it they are not read, as in the reference.
func TestEnvoyproxyPerSecond(t *testing.T) {
	base := map[string]string{"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}
	with := func(kv ...string) map[string]string {
		env := maps.Clone(base)
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string // the redis-persecond-* and redis-tls-* flags, sorted
	}{
		{"off", with("REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:6379"), ""},
		{"the reference's default socket", with("REDIS_PERSECOND", "true"),
			"redis-persecond-url=unix:///var/run/nutcracker/ratelimitpersecond.sock"},
		{"single, with everything", with("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:6380",
			"REDIS_PERSECOND_AUTH", "pw", "REDIS_PERSECOND_POOL_SIZE", "7", "REDIS_PERSECOND_PIPELINE_WINDOW", "1ms",
			"REDIS_PERSECOND_PIPELINE_LIMIT", "8", "REDIS_PERSECOND_TIMEOUT", "2s", "REDIS_TIMEOUT", "9s"),
			"redis-persecond-dial-timeout=2s redis-persecond-pipeline-limit=8 redis-persecond-pipeline-window=1ms redis-persecond-pool-size=7 " +
				"redis-persecond-read-timeout=2s redis-persecond-url=redis://:pw@ps:6380/0"},
		{"a cluster", with("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_TYPE", "CLUSTER",
			"REDIS_PERSECOND_URL", "a:7000,b:7001"),
			"redis-persecond-cluster=true redis-persecond-url=redis://a:7000/0?addr=b%3A7001"},
		{"sentinels", with("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_TYPE", "sentinel",
			"REDIS_PERSECOND_URL", "m,s1:26379", "REDIS_PERSECOND_SENTINEL_AUTH", "spw"),
			"redis-persecond-sentinel-addrs=s1:26379 redis-persecond-sentinel-master=m redis-persecond-sentinel-password=spw redis-persecond-url=redis://s1:26379/0"},
		{"TLS on the second only: the files are its", with("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:6380",
			"REDIS_PERSECOND_TLS", "true", "REDIS_TLS_CACERT", "ca.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
			"redis-persecond-tls-ca=ca.pem redis-persecond-url=rediss://ps:6380/0?skip_verify=true"},
		{"TLS on both: the files are both's", with("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:6380",
			"REDIS_PERSECOND_TLS", "true", "REDIS_TLS", "true", "REDIS_TLS_CACERT", "ca.pem"),
			"redis-persecond-tls-ca=ca.pem redis-persecond-url=rediss://ps:6380/0 redis-tls-ca=ca.pem"},
		{"TLS on the first only", with("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:6380",
			"REDIS_TLS", "true", "REDIS_TLS_CACERT", "ca.pem"),
			"redis-persecond-url=redis://ps:6380/0 redis-tls-ca=ca.pem"},
	} {
		ref, err := readEnvoyproxyEnv(lookupIn(c.env))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, k := range slices.Sorted(maps.Keys(ref.flags)) {
			if strings.HasPrefix(k, "redis-persecond-") || strings.HasPrefix(k, "redis-tls-") {
				got = append(got, k+"="+ref.flags[k])
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, strings.Join(got, " "), c.want)
		}
	}
}

func TestEnvoyproxyPerSecondErrors(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_PERSECOND_TYPE", "ring"}, `REDIS_PERSECOND_URL: REDIS_PERSECOND_TYPE="RING": want SINGLE, SENTINEL or CLUSTER`},
		{[]string{"REDIS_PERSECOND_URL", "a:1,b:2"}, `REDIS_PERSECOND_URL: "a:1,b:2": one host:port for REDIS_PERSECOND_TYPE=SINGLE`},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "unix", "REDIS_PERSECOND_TLS", "true"}, "REDIS_PERSECOND_URL: TLS over a Unix socket is not supported"},
		{[]string{"REDIS_PERSECOND_TYPE", "SENTINEL", "REDIS_PERSECOND_URL", "m"}, "REDIS_PERSECOND_URL: \"m\": want the master's name"},
		{[]string{"REDIS_PERSECOND", "maybe"}, `REDIS_PERSECOND="maybe": want true or false`},
	} {
		env := map[string]string{"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379",
			"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "ps:6380"}
		for i := 0; i+1 < len(c.env); i += 2 {
			env[c.env[i]] = c.env[i+1]
		}
		_, err := readEnvoyproxyEnv(lookupIn(env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.env, err, c.want)
		}
	}
}

// TestPerSecondFlags: the -redis-persecond-* flags need their URL and the
// Redis store, and are checked as the first Redis's are.
func TestPerSecondFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"-store", "redis"}, ""},
		{[]string{"-store", "redis", "-redis-persecond-url", "redis://ps:6380/0", "-redis-persecond-cluster"}, ""},
		{[]string{"-store", "redis", "-redis-persecond-cluster"}, "-redis-persecond-cluster: needs -redis-persecond-url"},
		{[]string{"-store", "redis", "-redis-persecond-tls-ca", "ca.pem"}, "-redis-persecond-tls-ca: needs -redis-persecond-url"},
		{[]string{"-redis-persecond-url", "redis://ps:6380/0"}, "-redis-persecond-url: a second Redis for per-second limits needs -store redis"},
		{[]string{"-store", "redis", "-redis-persecond-url", "redis://ps:6380/0", "-redis-persecond-pool-size", "-1"}, "-redis-persecond-pool-size: must be 0 or more"},
		{[]string{"-store", "redis", "-redis-persecond-url", "redis://ps:6380/0", "-redis-persecond-pipeline-window", "-1s"}, "-redis-persecond-pipeline-window: must not be negative"},
		{[]string{"-store", "redis", "-redis-persecond-url", "redis://ps:6380/0", "-redis-persecond-read-timeout", "-1s"}, "must not be negative"},
	} {
		s, err := parseFlags(c.args, lookupIn(nil), io.Discard, false)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		case c.want == "" && len(c.args) > 2:
			if ps, err := s.perSecond.server(); err != nil || ps == nil || ps.Connect.URL != "redis://ps:6380/0" || !ps.Connect.Cluster {
				t.Errorf("%v: the per-second Redis is %+v (%v)", c.args, ps, err)
			}
		case c.want == "":
			if ps, err := s.perSecond.server(); err != nil || ps != nil {
				t.Errorf("%v: a per-second Redis without -redis-persecond-url: %+v (%v)", c.args, ps, err)
			}
		}
	}
}
