// Package statsdtest receives StatsD and DogStatsD datagrams for tests.
package statsdtest

import (
	"net"
	"strings"
	"testing"
)

// ListenUDP listens on a free loopback UDP port until t ends and returns
// its address and the lines of the datagrams it receives (a datagram may
// hold several, a line per stat), in a channel of room lines.
func ListenUDP(t testing.TB, room int) (addr string, lines <-chan string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	ch := make(chan string, room)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				ch <- l
			}
		}
	}()
	return pc.LocalAddr().String(), ch
}
