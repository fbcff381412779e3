package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// What a run costs outside the load tool, read before and after the
// measured span: the service's CPU time (/proc/PID/stat, as
// scripts/bench.sh reads it) and Redis's commands and CPU time (INFO).

// userHZ is the unit of the CPU times in /proc/PID/stat: the kernel's
// USER_HZ, 100 on Linux whatever its own tick (getconf CLK_TCK).
const userHZ = 100

// reading is one reading of the counters.
type reading struct {
	self       time.Duration
	service    time.Duration
	hasService bool
	redis      redisInfo
	hasRedis   bool
}

// costs is what the counters moved by between two readings.
type costs struct {
	self       time.Duration // the load tool's CPU
	service    time.Duration // the service's CPU, if hasService
	hasService bool
	redisCPU   time.Duration // Redis's CPU, user and system, if hasRedis
	redisCalls map[string]int64
	// redisNetIn and redisNetOut are the bytes Redis read from and wrote
	// to its clients, if hasRedis.
	redisNetIn, redisNetOut int64
	hasRedis                bool
}

// redisInfo is what is read of Redis's INFO: its CPU time, user and system,
// the calls of each command (subcommands as "client|setinfo"), and the
// bytes it has read from and written to its clients.
type redisInfo struct {
	cpu           time.Duration
	calls         map[string]int64
	netIn, netOut int64
}

// readCounters reads the counters the command line asks for.
func readCounters(cfg rlqsConfig) (reading, error) {
	r := reading{self: cpuTime()}
	if cfg.pid > 0 {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cfg.pid))
		if err != nil {
			return r, fmt.Errorf("-pid %d: %w", cfg.pid, err)
		}
		if r.service, err = procCPU(string(stat)); err != nil {
			return r, fmt.Errorf("-pid %d: %w", cfg.pid, err)
		}
		r.hasService = true
	}
	if cfg.redis != "" {
		text, err := fetchRedisInfo(cfg.redis, 2*time.Second)
		if err != nil {
			return r, fmt.Errorf("-redis %s: %w", cfg.redis, err)
		}
		if r.redis, err = parseRedisInfo(text); err != nil {
			return r, fmt.Errorf("-redis %s: %w", cfg.redis, err)
		}
		r.hasRedis = true
	}
	return r, nil
}

// minus is what moved from b to r.
func (r reading) minus(b reading) costs {
	c := costs{self: r.self - b.self, hasService: r.hasService && b.hasService, hasRedis: r.hasRedis && b.hasRedis}
	if c.hasService {
		c.service = r.service - b.service
	}
	if c.hasRedis {
		c.redisCPU = r.redis.cpu - b.redis.cpu
		c.redisNetIn, c.redisNetOut = r.redis.netIn-b.redis.netIn, r.redis.netOut-b.redis.netOut
		c.redisCalls = map[string]int64{}
		for name, n := range r.redis.calls {
			if d := n - b.redis.calls[name]; d > 0 {
				c.redisCalls[name] = d
			}
		}
	}
	return c
}

// procCPU reads the CPU time, user and system, of every thread of a
// process from its /proc/PID/stat: fields 14 and 15, counted after the
// command name, which is in parentheses and may hold spaces or ')'.
func procCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name in parentheses")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want 13 at least", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat: utime and stime: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// parseRedisInfo reads INFO's used_cpu_sys and used_cpu_user (seconds),
// total_net_input_bytes and total_net_output_bytes, and each cmdstat_NAME
// line's calls.
func parseRedisInfo(text string) (redisInfo, error) {
	info := redisInfo{calls: map[string]int64{}}
	cpuFields := 0
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			s, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return info, fmt.Errorf("INFO %s: %w", name, err)
			}
			info.cpu += time.Duration(s * float64(time.Second))
			cpuFields++
		case name == "total_net_input_bytes" || name == "total_net_output_bytes":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return info, fmt.Errorf("INFO %s: %w", name, err)
			}
			if name == "total_net_input_bytes" {
				info.netIn = n
			} else {
				info.netOut = n
			}
		case strings.HasPrefix(name, "cmdstat_"):
			for field := range strings.SplitSeq(value, ",") {
				if n, ok := strings.CutPrefix(field, "calls="); ok {
					calls, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						return info, fmt.Errorf("INFO %s: %w", name, err)
					}
					info.calls[strings.TrimPrefix(name, "cmdstat_")] = calls
				}
			}
		}
	}
	if cpuFields != 2 {
		return info, errors.New("INFO has no used_cpu_sys and used_cpu_user")
	}
	return info, nil
}

// fetchRedisInfo sends INFO all on a connection of its own (no handshake,
// so that the only command this tool adds to Redis's counts is INFO) and
// returns the text.
func fetchRedisInfo(addr string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n"); err != nil {
		return "", err
	}
	return readBulk(bufio.NewReader(conn))
}

// readBulk reads one RESP bulk string reply; an error reply is an error.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("redis: %s", line[1:])
	case !strings.HasPrefix(line, "$"):
		return "", fmt.Errorf("redis: a reply %q, not a bulk string", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("redis: a bulk string of length %q", line[1:])
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
