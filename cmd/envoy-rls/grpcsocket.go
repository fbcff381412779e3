package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// unixSocketPath returns the path of a Unix socket address, "unix:path"
// or "unix:///absolute/path" as gRPC writes them; ok is false for a TCP
// address.
func unixSocketPath(addr string) (path string, ok bool) {
	rest, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(rest, "//"), true
}

// isUnixAddr reports whether addr is a Unix socket's.
func isUnixAddr(addr string) bool {
	_, ok := unixSocketPath(addr)
	return ok
}

// socketMode is the -grpc-socket-mode flag: the permissions of the gRPC
// Unix socket, in octal; unset leaves those the umask gives.
type socketMode struct {
	mode fs.FileMode
	set  bool
}

func (m *socketMode) Set(s string) error {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o777 {
		return fmt.Errorf("%q: want permissions in octal, such as 0660", s)
	}
	m.mode, m.set = fs.FileMode(n), true
	return nil
}

func (m *socketMode) String() string {
	if m == nil || !m.set {
		return ""
	}
	return fmt.Sprintf("%#o", uint32(m.mode))
}

// listenUnix listens on a Unix socket at path. A socket file left there
// by a process that is gone (killed before it could remove it) is
// removed first; one a process still answers on, or a file that is not a
// socket, is an error. The socket file is removed when the listener
// closes.
func listenUnix(listen func(network, addr string) (net.Listener, error), path string, mode socketMode) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("no path for the Unix socket")
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := listen("unix", path)
	if err != nil {
		return nil, err
	}
	if mode.set {
		if err := os.Chmod(path, mode.mode); err != nil {
			l.Close()
			return nil, fmt.Errorf("permissions of the socket: %w", err)
		}
	}
	return l, nil
}

// removeStaleSocket removes the socket at path if nothing listens on it.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket: not removed", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: another process listens on this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: cannot tell whether another process listens on it: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing the stale socket: %w", err)
	}
	return nil
}
