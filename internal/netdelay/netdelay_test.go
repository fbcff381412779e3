package netdelay

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves lines back, until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// roundTrip sends a line and returns how long its echo took, or an error
// if none came within timeout.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, bool) {
	t.Helper()
	begin := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(begin.Add(timeout))
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, false
	}
	if line != "ping\n" {
		t.Fatalf("echo %q", line)
	}
	return time.Since(begin), true
}

// TestLink: a round trip through a link of 50 ms takes 100 ms or a little
// more; across a cut nothing comes back and nothing fails; once healed,
// what waited comes back, then round trips take their 100 ms again; a new
// delay applies to what follows.
func TestLink(t *testing.T) {
	l := Start(t, echo(t), 50*time.Millisecond)
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for range 3 {
		took, ok := roundTrip(t, c, r, 2*time.Second)
		if !ok || took < 100*time.Millisecond || took > 400*time.Millisecond {
			t.Fatalf("a round trip through 50 ms each way took %s (%v), want 100 ms or a little more", took, ok)
		}
	}
	l.Cut()
	if _, ok := roundTrip(t, c, r, 300*time.Millisecond); ok {
		t.Fatal("an echo came back across a cut")
	}
	// A connection made across the cut waits too.
	c2, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatalf("a connection across a cut failed at once: %v", err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if _, ok := roundTrip(t, c2, r2, 200*time.Millisecond); ok {
		t.Fatal("a new connection's echo came back across a cut")
	}
	l.Heal()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("what waited across the cut: %q, %v", line, err)
	}
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := r2.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("what the new connection sent across the cut: %q, %v", line, err)
	}
	if took, ok := roundTrip(t, c, r, 2*time.Second); !ok || took < 100*time.Millisecond {
		t.Fatalf("after the heal: %s (%v)", took, ok)
	}
	l.SetDelay(0)
	time.Sleep(100 * time.Millisecond)
	if took, ok := roundTrip(t, c, r, 2*time.Second); !ok || took > 50*time.Millisecond {
		t.Fatalf("with no delay: %s (%v)", took, ok)
	}
}

// TestLinkClose: closing a link ends its connections.
func TestLinkClose(t *testing.T) {
	l := Start(t, echo(t), 0)
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, ok := roundTrip(t, c, r, time.Second); !ok {
		t.Fatal("no echo")
	}
	l.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a connection outlived its link")
	}
}
