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
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
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
	t    testing.TB
	addr string

	// A process of memcached from PATH...
	bin  string
	args []string
	cmd  *exec.Cmd
	// ...or a container.
	container testcontainers.Container
}

// Addr returns host:port.
func (s *Server) Addr() string { return s.addr }

// Client returns a plain client of the server, as the reference makes
// one, closed with the test.
func (s *Server) Client(t testing.TB) *memcache.Client {
	t.Helper()
	c := memcache.New(s.addr)
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
	s := &Server{t: t, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, args: args}
	t.Cleanup(s.Stop)
	return s
}

// Stop kills the server, as a crash would (its items are lost). Restart
// starts it again on the same port.
func (s *Server) Stop() {
	if s.container != nil {
		timeout := time.Duration(0)
		if err := s.container.Stop(context.Background(), &timeout); err != nil {
			s.t.Errorf("stopping the memcached container: %v", err)
		}
		return
	}
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// Pause stops the server's process without ending it (SIGSTOP): its port
// still accepts connections but nothing answers. Resume lets it go on.
func (s *Server) Pause() {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Skip("pausing needs a memcached process, not a container")
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pausing memcached: %v", err)
	}
}

// Resume undoes Pause.
func (s *Server) Resume() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts a stopped server on the same address and waits until it
// accepts connections.
func (s *Server) Restart() {
	s.t.Helper()
	if s.container != nil {
		s.t.Fatal("restarting a memcached container is not supported: it may come back on another port")
	}
	if s.cmd != nil {
		return
	}
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting memcached: %v", err)
	}
	if err := redistest.WaitListening(s.addr, 10*time.Second); err != nil {
		s.Stop()
		s.t.Fatalf("memcached %s did not start: %v", s.addr, err)
	}
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
	return &Server{t: t, addr: endpoint, container: c}
}
