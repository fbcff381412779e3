// Package netdelay is, for tests, a link between two places on one
// machine: a TCP proxy that delays what crosses it, each way, by a set
// time (a link's one-way latency), and that can be cut (a partition:
// nothing crosses, nothing fails at once, connections hang) and healed
// again. Regions on one machine talk to each other's Redis through it.
package netdelay

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Link forwards the connections made to its address to a target, each
// byte Delay later in each direction. It is safe for concurrent use.
type Link struct {
	target string
	lis    net.Listener

	mu    sync.Mutex
	delay time.Duration
	cut   bool
	heal  chan struct{} // closed when a cut heals
	conns map[net.Conn]struct{}
	done  bool
}

// Start listens on a free loopback port and forwards to target, each way
// delay later, until the test ends.
func Start(t testing.TB, target string, delay time.Duration) *Link {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{target: target, lis: lis, delay: delay, heal: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(l.heal) // not cut
	go l.accept()
	t.Cleanup(l.Close)
	return l
}

// Addr is the address that reaches the target through the link.
func (l *Link) Addr() string { return l.lis.Addr().String() }

// SetDelay sets the one-way delay of what crosses from now on.
func (l *Link) SetDelay(d time.Duration) {
	l.mu.Lock()
	l.delay = d
	l.mu.Unlock()
}

// Cut stops everything crossing the link: what is sent waits, new
// connections are accepted and wait, as across a partition; nothing
// fails at once.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cut {
		l.cut = true
		l.heal = make(chan struct{})
	}
}

// Heal lets what waited cross, and what follows, with the link's delay.
func (l *Link) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		l.cut = false
		close(l.heal)
	}
}

// Close ends the link and every connection through it.
func (l *Link) Close() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	conns := l.conns
	l.conns = nil
	if l.cut {
		l.cut = false
		close(l.heal)
	}
	l.mu.Unlock()
	l.lis.Close()
	for c := range conns {
		c.Close()
	}
}

// healed returns a channel closed once the link is not cut.
func (l *Link) healed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heal
}

func (l *Link) currentDelay() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay
}

// track keeps c to close with the link; false if the link is closed.
func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) accept() {
	for {
		c, err := l.lis.Accept()
		if err != nil {
			return
		}
		if l.track(c) {
			go l.serve(c)
		}
	}
}

// serve connects c to the target once the link is not cut (a connection
// made across a cut waits, as its SYN would), then forwards both ways.
func (l *Link) serve(c net.Conn) {
	defer l.untrack(c)
	<-l.healed()
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		return
	}
	if !l.track(up) {
		return
	}
	defer l.untrack(up)
	var wg sync.WaitGroup
	wg.Go(func() { l.forward(up, c) })
	wg.Go(func() { l.forward(c, up) })
	wg.Wait()
}

// chunk is bytes read, and when they may be written.
type chunk struct {
	b  []byte
	at time.Time
}

// forward copies from src to dst, each chunk the link's delay after it
// was read and never while the link is cut; when either side ends, both
// do.
func (l *Link) forward(dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				queue <- chunk{b[:n], time.Now().Add(l.currentDelay())}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		<-l.healed()
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	// One side ended: end both, and let the reader above drain.
	src.Close()
	dst.Close()
	for range queue {
	}
}
