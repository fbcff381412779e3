package examples

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestRedisClusterExample checks the Cluster manifest's redis.conf on a
// real redis-server: every setting is one it takes (it refuses to start on
// any other), and the ones docs/reliability.md relies on are set; the
// envoy-rls flags its comment gives name its nodes.
func TestRedisClusterExample(t *testing.T) {
	objs := manifests(t, "kubernetes/redis-cluster.yaml")
	for _, want := range []string{"ConfigMap/redis-cluster", "Service/redis-cluster", "StatefulSet/redis-cluster", "Job/redis-cluster-create"} {
		if objs[want] == nil {
			t.Fatalf("no %s", want)
		}
	}
	conf := at(t, objs["ConfigMap/redis-cluster"], "data", "redis.conf").(string)
	var args []string
	for _, line := range strings.Split(strings.TrimSpace(conf), "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == "cluster-config-file" {
			value = filepath.Join(t.TempDir(), "nodes.conf") // the volume's, here
		}
		args = append(args, "--"+name, strings.Trim(value, `"`))
	}
	srv := redistest.Start(t, args...)
	got, err := srv.Client(t).ConfigGet(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"cluster-enabled": "yes", "cluster-require-full-coverage": "no", "cluster-node-timeout": "5000",
		"save": "", "appendonly": "no",
	} {
		if got[name] != want {
			t.Errorf("%s is %q on the started server, want %q", name, got[name], want)
		}
	}
	if replicas := at(t, objs["StatefulSet/redis-cluster"], "spec", "replicas"); replicas != 6 {
		t.Errorf("%v nodes, want 6: three masters and a replica each", replicas)
	}
}

// TestRedisSentinelExample starts the Sentinel manifest's redis.conf on a
// real redis-server, and a real Sentinel on its sentinel.conf watching it
// (the master's name moved to where it runs here): both take every
// setting, and the Sentinel holds the ones docs/reliability.md relies on.
func TestRedisSentinelExample(t *testing.T) {
	objs := manifests(t, "kubernetes/redis-sentinel.yaml")
	for _, want := range []string{"ConfigMap/redis-sentinel", "Service/redis-sentinel", "StatefulSet/redis-sentinel"} {
		if objs[want] == nil {
			t.Fatalf("no %s", want)
		}
	}
	var args []string
	for _, line := range strings.Split(strings.TrimSpace(at(t, objs["ConfigMap/redis-sentinel"], "data", "redis.conf").(string)), "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		args = append(args, "--"+name, strings.Trim(value, `"`))
	}
	master := redistest.Start(t, args...)
	host, port, _ := net.SplitHostPort(master.Addr())
	conf := at(t, objs["ConfigMap/redis-sentinel"], "data", "sentinel.conf").(string)
	conf = strings.ReplaceAll(conf, "redis-sentinel-0.redis-sentinel.rate-limit.svc.cluster.local 6379", host+" "+port)
	sentinel := goredis.NewSentinelClient(&goredis.Options{Addr: redistest.StartSentinelConf(t, conf)})
	defer sentinel.Close()
	got, err := sentinel.Master(context.Background(), "rls").Result()
	if err != nil {
		t.Fatalf("SENTINEL MASTER rls: %v", err)
	}
	for name, want := range map[string]string{"quorum": "2", "down-after-milliseconds": "5000", "ip": host, "port": port} {
		if got[name] != want {
			t.Errorf("the Sentinel's %s is %q, want %q", name, got[name], want)
		}
	}
}
