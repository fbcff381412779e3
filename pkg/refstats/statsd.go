package refstats

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// StatsD sends the stats to a StatsD server (a statsd_exporter sidecar, for
// instance) at each flush: counters as their increase since the last
// flush, timings in milliseconds.
type StatsD struct {
	addr, network string
	log           *slog.Logger
	format        format

	mu     sync.Mutex
	counts map[string]uint64
	times  []timing
	lost   uint64 // timings dropped since the last flush: past maxTimings

	conn net.Conn // TCP: kept between flushes; nil until dialled
}

type timing struct {
	name string
	ms   float64
}

// maxTimings bounds the timings kept between two flushes: a busy service
// makes many calls a second, and StatsD only needs a sample.
const maxTimings = 10000

// maxPacket is the most a UDP packet carries: lines fit a common MTU.
const maxPacket = 1432

// NewStatsD sends to addr over network ("tcp" or "udp"), as plain StatsD
// lines unless an option says otherwise.
func NewStatsD(addr, network string, log *slog.Logger, opts ...StatsDOption) (*StatsD, error) {
	if network != "tcp" && network != "udp" {
		return nil, fmt.Errorf("statsd: protocol %q: want tcp or udp", network)
	}
	s := &StatsD{addr: addr, network: network, log: log, counts: map[string]uint64{}}
	for _, o := range opts {
		o(&s.format)
	}
	if s.format.dogStatsD && network != "udp" {
		return nil, fmt.Errorf("statsd: DogStatsD is sent over udp, not %s", network)
	}
	return s, nil
}

// Count adds n to a counter.
func (s *StatsD) Count(name string, n uint64) {
	s.mu.Lock()
	s.counts[name] += n
	s.mu.Unlock()
}

// Time records a timing.
func (s *StatsD) Time(name string, d time.Duration) {
	s.mu.Lock()
	if len(s.times) < maxTimings {
		s.times = append(s.times, timing{name, float64(d) / float64(time.Millisecond)})
	} else {
		s.lost++
	}
	s.mu.Unlock()
}

// Run flushes every interval until ctx ends, and once more then.
func (s *StatsD) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flush()
			if s.conn != nil {
				s.conn.Close()
			}
			return
		case <-t.C:
			s.flush()
		}
	}
}

// flush sends what was counted since the last flush. What cannot be sent
// (the server away) is dropped, as StatsD clients do: counting goes on.
func (s *StatsD) flush() {
	s.mu.Lock()
	counts, times, lost := s.counts, s.times, s.lost
	s.counts, s.times, s.lost = make(map[string]uint64, len(counts)), nil, 0
	s.mu.Unlock()
	if len(counts) == 0 && len(times) == 0 {
		return
	}
	lines := make([][]byte, 0, len(counts)+len(times))
	var value []byte
	for name, n := range counts {
		value = strconv.AppendUint(value[:0], n, 10)
		lines = append(lines, s.format.line(name, value, "c"))
	}
	for _, t := range times {
		value = strconv.AppendFloat(value[:0], t.ms, 'f', -1, 64)
		lines = append(lines, s.format.line(t.name, value, "ms"))
	}
	if err := s.send(lines); err != nil {
		s.log.Warn("statsd: stats not sent", "addr", s.addr, "err", err, "timings_dropped", lost)
	}
}

func (s *StatsD) send(lines [][]byte) error {
	if s.conn == nil {
		c, err := net.DialTimeout(s.network, s.addr, time.Second)
		if err != nil {
			return err
		}
		s.conn = c
	}
	s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	var packet []byte
	for _, l := range lines {
		if s.network == "udp" && len(packet)+len(l) > maxPacket && len(packet) > 0 {
			if _, err := s.conn.Write(packet); err != nil {
				return s.broken(err)
			}
			packet = packet[:0]
		}
		packet = append(packet, l...)
	}
	if _, err := s.conn.Write(packet); err != nil {
		return s.broken(err)
	}
	return nil
}

// broken drops a connection that failed, to dial again next time.
func (s *StatsD) broken(err error) error {
	s.conn.Close()
	s.conn = nil
	return err
}
