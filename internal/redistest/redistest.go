// Package redistest starts real Redis servers for tests: redis-server from
// PATH on a free loopback port (a single server, a 6-node Cluster, a
// Sentinel), or, for a single server, a container through testcontainers-go
// when a Docker engine answers. When neither is possible the test is
// skipped with the reason, or fails if RLS_REQUIRE_REDIS=1.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/servertest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// RequireEnv names the variable that turns a missing Redis into a failure.
const RequireEnv = "RLS_REQUIRE_REDIS"

// Unavailable skips t because Redis cannot be had, or fails it when
// RLS_REQUIRE_REDIS=1.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("Redis is required (%s=1) but unavailable: %s", RequireEnv, why)
	}
	t.Skipf("skipped, no Redis: %s", why)
}

// Server is one running Redis.
type Server struct {
	*servertest.Server
	tls bool
}

// URL returns the server's redis:// (or rediss://) URL, of database 0.
func (s *Server) URL() string { return s.DBURL(0) }

// DBURL returns the server's URL of database db: stores on one server that
// must not see each other's keys, as a separate Redis would have them.
func (s *Server) DBURL(db int) string {
	scheme := "redis://"
	if s.tls {
		scheme = "rediss://"
	}
	return scheme + s.Addr() + "/" + strconv.Itoa(db)
}

// Client returns a plain client to the server, closed with the test.
func (s *Server) Client(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Start starts a single Redis with the given extra redis-server arguments
// (the container fallback takes none).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return startProcess(t, bin, args, false)
	}
	if len(args) > 0 {
		Unavailable(t, "this test configures redis-server, which is not on PATH: install redis-server")
	}
	return startContainer(t)
}

// StartTLS starts a Redis that only speaks TLS, with the given files
// (PEM) and tls-auth-clients setting ("yes", "no" or "optional").
func StartTLS(t testing.TB, certFile, keyFile, caFile, authClients string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "a TLS Redis needs redis-server on PATH: install redis-server")
	}
	return startProcess(t, bin, []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", authClients}, true)
}

// New returns a Redis on a free port, not started yet: Restart starts it.
// It needs redis-server on PATH.
func New(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "this test starts and stops redis-server, which is not on PATH: install redis-server")
	}
	return newProcess(t, bin, args, false)
}

func startProcess(t testing.TB, bin string, extra []string, useTLS bool) *Server {
	t.Helper()
	s := newProcess(t, bin, extra, useTLS)
	s.Restart()
	return s
}

func newProcess(t testing.TB, bin string, extra []string, useTLS bool) *Server {
	t.Helper()
	port := FreePort(t)
	dir := t.TempDir()
	portArgs := []string{"--port", strconv.Itoa(port)}
	if useTLS {
		portArgs = []string{"--port", "0", "--tls-port", strconv.Itoa(port)}
	}
	logfile := filepath.Join(dir, "redis.log")
	args := append(portArgs, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", logfile)
	log := func() string { b, _ := os.ReadFile(logfile); return string(b) }
	return &Server{Server: servertest.Process(t, "redis-server", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin, append(args, extra...), log), tls: useTLS}
}

func startContainer(t testing.TB) *Server {
	t.Helper()
	if err := DockerHealthy(); err != nil {
		Unavailable(t, "redis-server is not on PATH and Docker does not answer (%v): install redis-server or start Docker", err)
	}
	ctx := context.Background()
	c, err := testcontainers.Run(ctx, "redis:7",
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("6379/tcp")))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("starting a Redis container: %v", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "6379/tcp", "")
	if err != nil {
		t.Fatalf("Redis container port: %v", err)
	}
	return &Server{Server: servertest.Container(t, "Redis", endpoint, c)}
}

// DockerHealthy reports whether a Docker engine answers, without the panic
// testcontainers may raise when there is none.
func DockerHealthy() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx)
}

// FreePort returns a loopback TCP port that was free a moment ago, and whose
// Cluster bus port (+10000) was too.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free port pair found")
	return 0
}

// WaitListening waits until addr accepts TCP connections, at most timeout.
func WaitListening(addr string, timeout time.Duration) error {
	return servertest.WaitListening(addr, timeout)
}

// Cluster is a running 6-node Redis Cluster: 3 masters, 3 replicas.
type Cluster struct {
	Nodes []*Server
}

// URL returns the Cluster's seed list as a go-redis URL with addr= parameters.
func (c *Cluster) URL() string {
	var extra []string
	for _, n := range c.Nodes[1:] {
		extra = append(extra, "addr="+n.Addr())
	}
	return "redis://" + c.Nodes[0].Addr() + "?" + strings.Join(extra, "&")
}

// StartCluster starts a 6-node Cluster with redis-server and redis-cli from
// PATH and waits until every slot is served and every replica has synced. args go to every node (after
// a node timeout of 5 s, which they may set again).
func StartCluster(t testing.TB, args ...string) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "a Cluster needs redis-server on PATH: install redis-server")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		Unavailable(t, "a Cluster needs redis-cli on PATH: install redis-server, which has it")
	}
	c := &Cluster{}
	addrs := make([]string, 6)
	for i := range addrs {
		// Each node has its own --dir, where Redis keeps its nodes.conf.
		// Replicas sync at once (Redis waits 5 s for more replicas to sync
		// with by default): one that has not synced is never promoted.
		n := startProcess(t, bin, append([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", "5000", "--repl-diskless-sync-delay", "0"}, args...), false)
		c.Nodes = append(c.Nodes, n)
		addrs[i] = n.Addr()
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		client := n.Client(t)
		for {
			info, err := client.ClusterInfo(ctx).Result()
			repl, rerr := client.Info(ctx, "replication").Result()
			synced := rerr == nil && (strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up"))
			if err == nil && synced && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Cluster node %s not ready after 30s: %v\n%s", n.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Masters returns the nodes that are masters now, by ROLE.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var masters []*Server
	for _, n := range c.Nodes {
		if !n.Running() {
			continue // stopped
		}
		client := goredis.NewClient(&goredis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
		role, err := client.Do(context.Background(), "ROLE").Slice()
		client.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			masters = append(masters, n)
		}
	}
	return masters
}

// Reshard moves slots slots from master from to master to, with
// redis-cli --cluster reshard (which migrates their keys), and returns
// when it is done.
func (c *Cluster) Reshard(t testing.TB, from, to *Server, slots int) {
	t.Helper()
	id := func(n *Server) string {
		client := goredis.NewClient(&goredis.Options{Addr: n.Addr()})
		defer client.Close()
		id, err := client.Do(context.Background(), "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID of %s: %v", n.Addr(), err)
		}
		return id
	}
	out, err := exec.Command("redis-cli", "--cluster", "reshard", from.Addr(), "--cluster-from", id(from), "--cluster-to", id(to),
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
}

// StartSentinel starts a Sentinel watching master under the name name, and
// returns its address once it knows the master.
func StartSentinel(t testing.TB, master *Server, name string) string {
	t.Helper()
	host, mport, _ := net.SplitHostPort(master.Addr())
	addr := StartSentinelConf(t, fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n", name, host, mport, name))
	client := goredis.NewSentinelClient(&goredis.Options{Addr: addr})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := client.GetMasterAddrByName(context.Background(), name).Result(); err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel %s does not know master %s after 10s", addr, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartSentinelConf starts a Sentinel with the directives conf (after its
// port, address, directory and log file), and returns its address.
func StartSentinelConf(t testing.TB, conf string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "a Sentinel needs redis-server on PATH: install redis-server")
	}
	port := FreePort(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n%s", port, dir, filepath.Join(dir, "sentinel.log"), conf)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s := servertest.Process(t, "redis-server --sentinel", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin, []string{path, "--sentinel"}, nil)
	s.Restart()
	return s.Addr()
}

// CommandCalls returns the calls Redis has counted of each command
// (INFO commandstats), by name: "get", "evalsha", "config|resetstat".
func CommandCalls(t testing.TB, c *goredis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}
