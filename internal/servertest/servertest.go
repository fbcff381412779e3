// Package servertest is a server a test needs, Redis or memcached: a
// process from PATH on a loopback port, which the test may kill, pause and
// start again there, or a container.
package servertest

import (
	"context"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// Server is a running server.
type Server struct {
	t    testing.TB
	name string // what it is called in failures: "redis-server"
	addr string

	// A process of bin, started with args...
	bin  string
	args []string
	log  func() string // its log, for a failure to start; nil: none
	cmd  *exec.Cmd
	// ...or a container.
	container testcontainers.Container
}

// Process returns a server that Restart starts as bin with args, listening
// on addr, called name in failures; log, if not nil, returns its log for
// a failure to start. It is stopped when t ends.
func Process(t testing.TB, name, addr, bin string, args []string, log func() string) *Server {
	s := &Server{t: t, name: name, addr: addr, bin: bin, args: args, log: log}
	t.Cleanup(s.Stop)
	return s
}

// Container returns the server a container runs, at addr.
func Container(t testing.TB, name, addr string, c testcontainers.Container) *Server {
	return &Server{t: t, name: name, addr: addr, container: c}
}

// Addr returns host:port.
func (s *Server) Addr() string { return s.addr }

// Running reports whether the server's process runs (paused or not): not
// stopped. False for a container, whose process the test does not hold.
func (s *Server) Running() bool { return s.cmd != nil }

// Stop kills the server, as a crash would. Restart starts it again on the
// same port.
func (s *Server) Stop() {
	if s.container != nil {
		timeout := time.Duration(0)
		if err := s.container.Stop(context.Background(), &timeout); err != nil {
			s.t.Errorf("stopping the %s container: %v", s.name, err)
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
// still accepts connections but nothing answers, as with a hung server.
// Resume lets it go on; Stop kills it paused or not.
func (s *Server) Pause() {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Skipf("pausing needs a %s process, not a container", s.name)
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pausing %s: %v", s.name, err)
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
		s.t.Fatalf("restarting a %s container is not supported: it may come back on another port", s.name)
	}
	if s.cmd != nil {
		return
	}
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", s.name, err)
	}
	if err := WaitListening(s.addr, 10*time.Second); err != nil {
		s.Stop()
		log := ""
		if s.log != nil {
			log = "; log:\n" + s.log()
		}
		s.t.Fatalf("%s %s did not start: %v%s", s.name, s.addr, err, log)
	}
}

// WaitListening waits until something accepts TCP connections on addr.
func WaitListening(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
