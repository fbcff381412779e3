package main

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testpki"
)

// TestRegionFlags: the region settings parse as documented, and each
// wrong one is refused with a message naming the flag and what is wrong,
// never a password of a peer's URL.
func TestRegionFlags(t *testing.T) {
	s, err := parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers",
		"us=redis://redis.us:6379/0, ap=rediss://:s3cret@redis.ap:6380/0?addr=redis.ap:6381"}, lookupIn(nil), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.region.parsed; len(got) != 2 || got[0] != (regionPeer{name: "us", url: "redis://redis.us:6379/0"}) ||
		got[1].name != "ap" || !got[1].cluster {
		t.Fatalf("peers %+v", got)
	}
	if s, err := parseFlags([]string{"-store", "redis"}, lookupIn(map[string]string{"RLS_REGION": "eu", "RLS_REGION_PEERS": "us=redis://u:1/0"}), io.Discard, false); err != nil || s.region.name != "eu" || len(s.region.parsed) != 1 {
		t.Fatalf("from the environment: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-region", "eu"}, "-region needs -store redis"},
		{[]string{"-store", "memcached", "-memcached-addrs", "m:11211", "-region", "eu"}, "-region needs -store redis"},
		{[]string{"-store", "redis", "-region", "EU"}, `-region "EU"`},
		{[]string{"-store", "redis", "-region-peers", "us=redis://u:1/0"}, "-region-peers needs -region"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us"}, `is not NAME=URL`},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "eu=redis://u:1/0"}, "this replica's own region"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0,us=redis://v:1/0"}, `region "us" twice`},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=http://u:1/0"}, "redis:// or rediss://"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "Us=redis://u:1/0"}, `"Us"`},
		{[]string{"-store", "redis", "-region", "eu", "-region-interval", "0s"}, "-region-interval"},
		{[]string{"-store", "redis", "-region", "eu", "-region-silence", "500ms"}, "-region-silence"},
		{[]string{"-store", "redis", "-redis-mode", "transactions", "-region", "eu"}, "-redis-mode script"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "rediss://:s3cret@redis.ap:6380/0"}, "item 1 is not NAME=URL"},
		{[]string{"-store", "redis", "-region-peer-password-files", "us=/run/us"}, "-region-peer-password-files needs -region"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0", "-region-peer-password-files", "/run/us"}, "item 1 is not NAME=FILE"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0", "-region-peer-password-files", "us="}, "item 1 is not NAME=FILE"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0", "-region-peer-password-files", "ap=/run/ap"}, `"ap" is not a region of -region-peers`},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0", "-region-peer-password-files", "eu=/run/eu"}, "this replica's own region"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0", "-region-peer-password-files", "us=/run/a,us=/run/b"}, `region "us" twice`},
	} {
		_, err := parseFlags(c.args, lookupIn(nil), io.Discard, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	for _, peers := range []string{"us=://:s3cret@x", "rediss://:s3cret@redis.ap:6380/0", "us=redis://:s3cret@x:1/0,eu=redis://:s3cret@y:1/0"} {
		_, err = parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers", peers}, lookupIn(nil), io.Discard, false)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("-region-peers %s: %v (an error, the password never shown)", peers, err)
		}
	}
}

// TestRegionPeerPasswordFiles: -region-peer-password-files gives the
// peers it names their file (from the flag or its variable), and a peer's
// store authenticates with the file's password, one a URL could not carry
// unescaped, in place of its URL's.
func TestRegionPeerPasswordFiles(t *testing.T) {
	const peers = "us=redis://redis.us:6379/0,ap=rediss://redis.ap:6380/0"
	s, err := parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers", peers,
		"-region-peer-password-files", "ap=/run/secrets/ap"}, lookupIn(nil), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.region.parsed; len(got) != 2 || got[0].password != "" || got[1].password != "/run/secrets/ap" {
		t.Fatalf("peers %+v", got)
	}
	s, err = parseFlags([]string{"-store", "redis"}, lookupIn(map[string]string{"RLS_REGION": "eu", "RLS_REGION_PEERS": peers,
		"RLS_REGION_PEER_PASSWORD_FILES": "us=/run/secrets/us, ap=/run/secrets/ap"}), io.Discard, false)
	if err != nil {
		t.Fatalf("from the environment: %v", err)
	}
	if got := s.region.parsed; got[0].password != "/run/secrets/us" || got[1].password != "/run/secrets/ap" {
		t.Fatalf("from the environment: peers %+v", got)
	}

	const password = "p@ss/w:rd?#%&=, x"
	srv := redistest.Start(t, "--requirepass", password)
	dir := t.TempDir()
	file := filepath.Join(dir, "us")
	if err := os.WriteFile(file, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		url, file string
		ok        bool
	}{
		{srv.URL(), file, true},
		{"redis://:wrong@" + srv.Addr() + "/0", file, true}, // the file's replaces the URL's
		{srv.URL(), "", false},
	} {
		s, err := parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers", "us=" + c.url,
			"-region-peer-password-files", "us=" + cmp.Or(c.file, "unused")}, lookupIn(nil), io.Discard, false)
		if err != nil {
			t.Fatal(err)
		}
		p := s.region.parsed[0]
		p.password = c.file
		st, err := peerStore(s, p, log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = st.Check(ctx)
		cancel()
		st.Close()
		if (err == nil) != c.ok {
			t.Errorf("%s with password file %q: Check: %v, want ok=%v", c.url, c.file, err, c.ok)
		}
	}

	s, err = parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers", "us=" + srv.URL(),
		"-region-peer-password-files", "us=" + filepath.Join(dir, "missing")}, lookupIn(nil), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peerStore(s, s.region.parsed[0], log); err == nil || !strings.Contains(err.Error(), "-region-peer-password-files: region \"us\"") ||
		!strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing password file: %v", err)
	}
}

// TestRegionPeerTLS: a rediss:// peer is verified with this region's
// -redis-tls-ca and shown its -redis-tls-cert: a peer's Redis behind the
// organisation's own CA, wanting client certificates, is reached with
// them and refused without.
func TestRegionPeerTLS(t *testing.T) {
	pki := testpki.New(t)
	srv := redistest.StartTLS(t, pki.ServerCert, pki.ServerKey, pki.CACert, "yes")
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name  string
		flags []string
		ok    bool
	}{
		{"with the region's TLS files", []string{"-redis-url", srv.DBURL(1), "-redis-tls-ca", pki.CACert,
			"-redis-tls-cert", pki.ClientCert, "-redis-tls-key", pki.ClientKey}, true},
		{"without a client certificate", []string{"-redis-url", srv.DBURL(1), "-redis-tls-ca", pki.CACert}, false},
		{"an upper-case scheme", []string{"-redis-url", srv.DBURL(1), "-redis-tls-ca", pki.CACert,
			"-redis-tls-cert", pki.ClientCert, "-redis-tls-key", pki.ClientKey}, true},
		{"without the CA", nil, false},
	} {
		peer := srv.URL()
		if c.name == "an upper-case scheme" {
			peer = "REDISS" + strings.TrimPrefix(peer, "rediss")
		}
		args := append([]string{"-store", "redis", "-region", "eu", "-region-peers", "us=" + peer}, c.flags...)
		s, err := parseFlags(args, lookupIn(nil), io.Discard, false)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		st, err := peerStore(s, s.region.parsed[0], log)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = st.Check(ctx)
		cancel()
		st.Close()
		if (err == nil) != c.ok {
			t.Errorf("%s: Check: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// TestRegionsBesideTheReferenceEnvironment: an image swapped in for
// envoyproxy/ratelimit reads its variables (REDIS_URL, its store) and the
// region settings from RLS_ variables beside them.
func TestRegionsBesideTheReferenceEnvironment(t *testing.T) {
	env := map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.eu:6379",
		"RLS_REGION": "eu", "RLS_REGION_PEERS": "us=redis://redis.us:6379/0", "RLS_REGION_INTERVAL": "2s"}
	s, err := parseFlags(nil, lookupIn(env), io.Discard, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.region.name != "eu" || len(s.region.parsed) != 1 || s.region.parsed[0].name != "us" || s.region.interval != 2*time.Second {
		t.Fatalf("region %q, peers %+v, interval %v", s.region.name, s.region.parsed, s.region.interval)
	}
	env["BACKEND_TYPE"] = "memcache"
	env["MEMCACHE_HOST_PORT"] = "memcached:11211"
	if _, err := parseFlags(nil, lookupIn(env), io.Discard, true); err == nil || !strings.Contains(err.Error(), "-region needs -store redis") {
		t.Fatalf("regions on the reference's memcache backend: %v", err)
	}
}
