package rls

import (
	"math"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// The IETF httpapi draft's fields (draft-ietf-httpapi-ratelimit-headers-10,
// structured-field syntax).
const (
	headerPolicy    = "RateLimit-Policy"
	headerRateLimit = "RateLimit"
)

// ietfHeaders returns RateLimit-Policy, one policy for every limit the
// request was checked against (named after the limit: q its size, w the
// seconds a full bucket takes to drain), RateLimit for the binding limit
// (r what remains, t the seconds until it is empty, or when over until the
// request could pass) and, when over, Retry-After.
func ietfHeaders(w *work, all *verdict) []*corev3.HeaderValue {
	var (
		policy []byte
		seen   []*descriptors.Rule
	)
	for j := range w.levels {
		k := w.bucketOf[j]
		rule := w.levels[j].Rule
		if k < 0 || w.shadow(k) || slices.Contains(seen, rule) {
			continue
		}
		seen = append(seen, rule)
		if len(policy) > 0 {
			policy = append(policy, ", "...)
		}
		policy = appendPolicyName(policy, rule)
		policy = append(policy, ";q="...)
		policy = strconv.AppendInt(policy, rule.Limit.Size, 10)
		policy = append(policy, ";w="...)
		policy = strconv.AppendInt(policy, policyWindow(rule.Limit, w.now), 10)
	}
	var limit []byte
	limit = appendPolicyName(limit, all.binding)
	limit = append(limit, ";r="...)
	t := roundUpSeconds(all.bindingClear)
	if all.over {
		limit = append(limit, '0')
		t = wholeSeconds(all.reset)
	} else {
		limit = strconv.AppendInt(limit, all.remaining, 10)
	}
	limit = append(limit, ";t="...)
	limit = strconv.AppendInt(limit, t, 10)

	h := []*corev3.HeaderValue{
		{Key: headerPolicy, Value: string(policy)},
		{Key: headerRateLimit, Value: string(limit)},
	}
	if all.over {
		h = append(h, &corev3.HeaderValue{Key: headerRetryAfter, Value: strconv.FormatInt(t, 10)})
	}
	return h
}

// appendPolicyName appends a limit's name (its path in the config when it
// has none) as a structured-field string: quoted, '"' and '\' escaped, and
// what a string may not hold (outside printable ASCII) as '?'.
func appendPolicyName(b []byte, r *descriptors.Rule) []byte {
	name := r.Label()
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// roundUpSeconds rounds d up to whole seconds (0 stays 0).
func roundUpSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// policyWindow is a policy's window in whole seconds (at least 1): a
// window's length (a calendar window's period holding now: a month is 28
// to 31 days), or how long a full bucket takes to drain.
func policyWindow(l limit.Limit, now time.Time) int64 {
	if l.IsCalendar() {
		p := l.FixedPeriod(now.UnixMicro())
		return max(1, roundUpSeconds(time.Duration(p.End-p.Start)*time.Microsecond))
	}
	if l.Algorithm == limit.SlidingWindow || l.Algorithm == limit.FixedWindow {
		return max(1, roundUpSeconds(l.Window))
	}
	drips := max(1, (l.Size+l.DripSize-1)/max(l.DripSize, 1))
	if rate := int64(max(l.DripRate, time.Microsecond)); drips > math.MaxInt64/rate {
		return math.MaxInt64 / int64(time.Second)
	}
	return wholeSeconds(time.Duration(drips) * l.DripRate)
}
