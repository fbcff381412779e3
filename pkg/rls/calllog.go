package rls

import (
	"context"
	"strconv"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
)

// How much of a request the debug line of a call shows: a request may
// carry megabytes, which a log line should not.
const (
	logDescriptors = 8
	logEntries     = 8
	logBytes       = 64
)

// logCall writes the debug line of a call: its domain, descriptors and
// code and, per descriptor, the level that decided its status (its limit's
// name, or path) and what remains there. w is the call's work, nil if it
// ended before resolving.
func (s *Service) logCall(ctx context.Context, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, err error, w *work) {
	code := codeName(resp.GetOverallCode())
	if err != nil {
		code = status.Code(grpcStatus(err)).String()
	}
	descs := req.GetDescriptors()
	n := min(len(descs), logDescriptors)
	shown := make([]string, n)
	deciding := make([]string, n)
	remaining := make([]string, n)
	for i, d := range descs[:n] {
		var b strings.Builder
		for j, e := range d.GetEntries() {
			if j == logEntries {
				b.WriteString(",...")
				break
			}
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(clip(e.GetKey()))
			b.WriteByte('=')
			b.WriteString(clip(e.GetValue()))
		}
		shown[i], deciding[i], remaining[i] = b.String(), "-", "-"
		if w != nil && i < len(w.verdicts) && w.verdicts[i].binding != nil {
			v := &w.verdicts[i]
			deciding[i], remaining[i] = v.binding.Label(), strconv.FormatInt(v.remaining, 10)
		}
	}
	if len(descs) > n {
		shown = append(shown, "... "+strconv.Itoa(len(descs)-n)+" more")
	}
	s.log.DebugContext(ctx, "rate-limit call", "domain", clip(req.GetDomain()), "code", code,
		"descriptors", shown, "deciding", deciding, "remaining", remaining)
}

// clip shortens s for a log line.
func clip(s string) string {
	if len(s) <= logBytes {
		return s
	}
	return s[:logBytes] + "..."
}
