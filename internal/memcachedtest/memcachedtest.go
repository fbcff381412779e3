// Package memcachedtest starts a real memcached for tests: memcached from
// PATH on a free loopback port, or else a container (memcached:1.6)
// through testcontainers-go when a Docker engine answers. When neither is
// possible the test is skipped with the reason, or fails if
// RLS_REQUIRE_REDIS=1 (the variable that makes CI require every server
// the tests need).
package memcachedtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/servertest"
)

// RequireEnv names the variable that turns a missing memcached into a
// failure.
const RequireEnv = "RLS_REQUIRE_REDIS"

// Unavailable skips t because memcached cannot be had, or fails it when
// RLS_REQUIRE_REDIS=1.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("memcached is required (%s=1) but unavailable: %s", RequireEnv, why)
	}
	t.Skipf("skipped, no memcached: %s", why)
}

// Server is one running memcached.
type Server struct {
	*servertest.Server
}

// Client returns a plain client of the server, as the reference makes
// one, closed with the test.
func (s *Server) Client(t testing.TB) *memcache.Client {
	t.Helper()
	c := memcache.New(s.Addr())
	t.Cleanup(func() { c.Close() })
	return c
}

// Start starts a memcached for the test, stopped when it ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if bin, err := exec.LookPath("memcached"); err == nil {
		s := newProcess(t, bin)
		s.Restart()
		return s
	}
	return startContainer(t)
}

// New returns a memcached on a free port, not started yet: Restart starts
// it. It needs memcached on PATH.
func New(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		Unavailable(t, "this test starts and stops memcached, which is not on PATH: install memcached")
	}
	return newProcess(t, bin)
}

func newProcess(t testing.TB, bin string) *Server {
	t.Helper()
	port := redistest.FreePort(t)
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses root without it
	}
	return &Server{servertest.Process(t, "memcached", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin, args, nil)}
}

func startContainer(t testing.TB) *Server {
	t.Helper()
	if err := redistest.DockerHealthy(); err != nil {
		Unavailable(t, "memcached is not on PATH and Docker does not answer (%v): install memcached or start Docker", err)
	}
	ctx := context.Background()
	c, err := testcontainers.Run(ctx, "memcached:1.6",
		testcontainers.WithExposedPorts("11211/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("11211/tcp")))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("starting a memcached container: %v", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "11211/tcp", "")
	if err != nil {
		t.Fatalf("memcached container port: %v", err)
	}
	return &Server{servertest.Container(t, "memcached", endpoint, c)}
}
