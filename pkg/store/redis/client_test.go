package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestNewClientOptions(t *testing.T) {
	c, err := NewClient(ClientOptions{URL: "redis://:secret@db:6380/2?pool_size=7&read_timeout=2s", ReadTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*goredis.Client).Options()
	if o.Addr != "db:6380" || o.DB != 2 || o.Password != "secret" || o.PoolSize != 7 || o.ReadTimeout != 250*time.Millisecond ||
		!o.ContextTimeoutEnabled || o.MaxRetries != 0 { // -1 given: no retries, stored as 0
		t.Fatalf("options: %+v", o)
	}

	unix, err := NewClient(ClientOptions{URL: "unix:///run/redis.sock?db=1"})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	if o := unix.(*goredis.Client).Options(); o.Network != "unix" || o.Addr != "/run/redis.sock" || o.DB != 1 {
		t.Fatalf("unix options: %+v", o)
	}

	cluster, err := NewClient(ClientOptions{URL: "redis://a:1?addr=b:2&addr=c:3", Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	if o := cluster.(*goredis.ClusterClient).Options(); strings.Join(o.Addrs, ",") != "a:1,b:2,c:3" {
		t.Fatalf("cluster seeds: %v", o.Addrs)
	}
}

func TestNewClientErrors(t *testing.T) {
	cases := []struct {
		o    ClientOptions
		want string
	}{
		{ClientOptions{URL: "http://user:secret@x"}, "http://user:xxxxx@x: the scheme must be"},
		{ClientOptions{URL: "redis://x", CAFile: "ca.pem"}, "TLS certificate files need a rediss:// URL"},
		{ClientOptions{URL: "rediss://x", CertFile: "c.pem"}, "both the certificate and the key"},
		{ClientOptions{URL: "redis://x", Cluster: true, SentinelMaster: "m"}, "Cluster or Sentinel, not both"},
		{ClientOptions{URL: "redis://x", SentinelMaster: "m"}, "the sentinels' addresses are required"},
		{ClientOptions{URL: "unix:///s", Cluster: true}, "a unix socket reaches one server"},
		{ClientOptions{URL: "rediss://x", CAFile: "/does/not/exist"}, "redis TLS CA"},
		{ClientOptions{URL: "redis://x/notadb"}, "invalid database number"},
	}
	for _, c := range cases {
		_, err := NewClient(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%+v: got %v, want an error with %q and no password", c.o, err, c.want)
		}
	}
}
