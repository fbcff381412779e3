package rls

import (
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// allOK answers a request that no limit applies to.
func allOK(n int) *rlsv3.RateLimitResponse { return &newResponse(n).resp }

// respond builds the response from the decided buckets: one status per
// descriptor, each the most restrictive of its levels, and the headers,
// the most restrictive of all. Shadow levels are left out of both: they
// never change what a client sees.
func (s *Service) respond(domain *descriptors.Domain, req *rlsv3.RateLimitRequest, w *work) *rlsv3.RateLimitResponse {
	return s.response(domain, req, w, true)
}

// response is respond; call says the response is a call's, which the
// observer and the log are told of, and not an explanation's.
//
// A descriptor over a limit makes the answer OVER_LIMIT; over a quota-mode
// limit only, it does so when every quota descriptor of the request is
// over (envoyproxy/ratelimit's quota mode).
func (s *Service) response(domain *descriptors.Domain, req *rlsv3.RateLimitRequest, w *work, call bool) *rlsv3.RateLimitResponse {
	n := len(w.starts) - 1
	b := newResponse(n)
	resp := &b.resp
	var all verdict
	var quotas, quotasOver int
	for i := range n {
		var v verdict
		quota := s.quotaMode && !w.unlimited[i] // every descriptor is a quota, as there
		for j := w.starts[i]; j < w.starts[i+1]; j++ {
			k := w.bucketOf[j]
			if k < 0 || w.skipped[k] {
				continue // replaced, or not decided: the cache rejected the request first
			}
			l, r := &w.levels[j], &w.results[k]
			shadow := w.shadow(k)
			if call {
				s.observer.Limit(domain.Name, l.Rule, l.Key, w.hits[i], r, shadow)
			}
			if shadow {
				if !r.Admitted && call {
					s.log.Debug("shadow limit would reject", "domain", domain.Name, "limit", l.Rule.Path, "name", l.Rule.Name)
				}
				continue
			}
			quota = quota || w.quota[k]
			v.add(l.Rule, r, w.quota[k])
			all.add(l.Rule, r, w.quota[k])
		}
		w.verdicts = append(w.verdicts, v)
		v.status(&b.statuses[i], w.now)
		if w.unlimited[i] {
			b.statuses[i].st.LimitRemaining = math.MaxUint32
		}
		if v.overRegular {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if quota {
			quotas++
			if v.over {
				quotasOver++
			}
		}
	}
	if quotas > 0 && quotasOver == quotas {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	// Headers and body say "over" only when the answer is.
	all.over = all.over && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	if all.over && domain.OverLimitBody != "" {
		resp.RawBody = overLimitBody(domain.OverLimitBody, all.reset)
	}
	switch {
	case !all.limited || s.headers == NoHeaders:
	case s.headers == IETFHeaders:
		resp.ResponseHeadersToAdd = ietfHeaders(w, &all)
	case s.headers == EnvoyproxyHeaders:
		resp.ResponseHeadersToAdd = s.referenceHeaders(b, w)
	default:
		resp.ResponseHeadersToAdd = all.headers(b, s.headers == LeakyHeaders)
	}
	if s.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(domain, req, w, b)
	}
	return resp
}

// response is a response and the messages it points to, allocated
// together: a response is built for every request, and a few large
// allocations cost less than a dozen small ones.
type response struct {
	resp       rlsv3.RateLimitResponse
	statusPtrs [2]*rlsv3.RateLimitResponse_DescriptorStatus // for up to 2 descriptors
	headerPtrs [4]*corev3.HeaderValue
	headers    [4]corev3.HeaderValue
	statuses   []descStatus
}

// descStatus is a descriptor's status and the messages it points to.
type descStatus struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// newResponse returns an OK response with n OK statuses.
func newResponse(n int) *response {
	b := &response{statuses: make([]descStatus, n)}
	ptrs := b.statusPtrs[:0]
	if n > len(b.statusPtrs) {
		ptrs = make([]*rlsv3.RateLimitResponse_DescriptorStatus, 0, n)
	}
	for i := range b.statuses {
		b.statuses[i].st.Code = rlsv3.RateLimitResponse_OK
		ptrs = append(ptrs, &b.statuses[i].st)
	}
	b.resp.OverallCode = rlsv3.RateLimitResponse_OK
	b.resp.Statuses = ptrs
	return b
}

// failureResponse answers while the store fails: FailAllow passes every
// descriptor; FailDeny rejects every descriptor that has a limit, naming
// its deepest one, without figures the store could not give.
func failureResponse(mode FailureMode, w *work) *rlsv3.RateLimitResponse {
	n := len(w.starts) - 1
	b := newResponse(n)
	for i := range n {
		if w.unlimited[i] {
			b.statuses[i].st.LimitRemaining = math.MaxUint32
			continue
		}
		if mode != FailDeny {
			continue
		}
		var deepest *descriptors.Rule
		for j := w.starts[i]; j < w.starts[i+1]; j++ {
			if b := w.bucketOf[j]; b >= 0 && !w.shadow(b) {
				deepest = w.levels[j].Rule
			}
		}
		if deepest == nil {
			continue
		}
		ds := &b.statuses[i]
		setLimit(&ds.limit, deepest)
		ds.st.Code, ds.st.CurrentLimit = rlsv3.RateLimitResponse_OVER_LIMIT, &ds.limit
		b.resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &b.resp
}

// verdict is the most restrictive of several levels: over if any is over,
// the least remaining, the longest time to clear and to reset.
type verdict struct {
	limited     bool // a level was added
	over        bool
	overRegular bool // over a limit not in quota mode
	remaining   int64
	clear       time.Duration
	reset       time.Duration     // when over: until every over level has room
	binding     *descriptors.Rule // the level that decides: over, or the least remaining
	// bindingClear is the binding level's own time to clear, which the
	// IETF RateLimit field gives for the policy it names.
	bindingClear time.Duration
}

func (v *verdict) add(rule *descriptors.Rule, r *limit.Result, quota bool) {
	if !v.limited {
		v.limited, v.remaining = true, math.MaxInt64
	}
	switch {
	case !r.Admitted:
		if !v.over || r.Reset > v.reset {
			v.reset, v.binding = r.Reset, rule
		}
		v.over = true
		v.overRegular = v.overRegular || !quota
	case !v.over && r.Remaining <= v.remaining:
		v.binding, v.bindingClear = rule, r.Clear // on a tie, the deeper level
	}
	v.remaining = min(v.remaining, r.Remaining)
	v.clear = max(v.clear, r.Clear)
}

// status fills in a descriptor's status from its verdict, decided at now.
// Its duration_until_reset is the time until it is over no more, or until
// it is empty; a fixed window's, the time to the window's end, as
// envoyproxy/ratelimit reports it.
func (v *verdict) status(s *descStatus, now time.Time) {
	st := &s.st
	st.Code = rlsv3.RateLimitResponse_OK
	if !v.limited {
		return
	}
	setLimit(&s.limit, v.binding)
	st.CurrentLimit = &s.limit
	st.LimitRemaining = uint32(min(v.remaining, math.MaxUint32))
	d := v.clear
	if v.binding.Limit.Algorithm == limit.FixedWindow && !now.IsZero() {
		d = max(d, windowEnd(v.binding.Limit, now))
	}
	if v.over {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		d = v.reset
	}
	s.reset.Seconds, s.reset.Nanos = int64(d/time.Second), int32(d%time.Second)
	st.DurationUntilReset = &s.reset
}

// windowEnd is the time from now to the end of the fixed window of l that
// holds now: a calendar window's, to the end of its period.
func windowEnd(l limit.Limit, now time.Time) time.Duration {
	if l.IsCalendar() {
		us := now.UnixMicro()
		return time.Duration(l.FixedPeriod(us).End-us) * time.Microsecond
	}
	win := l.Fixed().Window
	return win - time.Duration(now.UnixNano()%int64(win))
}

// setLimit reports a rule as the response's current_limit.
func setLimit(l *rlsv3.RateLimitResponse_RateLimit, r *descriptors.Rule) {
	l.Name = r.Name
	l.RequestsPerUnit = r.Rate.RequestsPerUnit
	l.Unit = responseUnits[r.Rate.Unit]
	if r.Rate.Multiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(r.Rate.Multiplier)
	}
}

// The response headers. Envoy lower-cases names on HTTP/2 and HTTP/3.
const (
	headerRemaining  = "X-RateLimit-Remaining"
	headerClear      = "X-RateLimit-Clear"
	headerReset      = "X-RateLimit-Reset"
	headerRetryAfter = "Retry-After"
)

// headers returns the response headers, in b: all of them, or only those
// that Envoy's own X-RateLimit headers lack. Their values are formatted into
// one buffer, made a string once and sliced.
func (v *verdict) headers(b *response, all bool) []*corev3.HeaderValue {
	var (
		buf  [96]byte
		ends [4]int
		n    int
	)
	text := buf[:0]
	add := func(key string) {
		b.headers[n].Key, ends[n] = key, len(text)
		n++
	}
	if all {
		text = strconv.AppendInt(text, v.remaining, 10)
		add(headerRemaining)
	}
	text = appendSeconds(text, v.clear)
	add(headerClear)
	if v.over {
		if all {
			text = appendSeconds(text, v.reset)
			add(headerReset)
		}
		text = strconv.AppendInt(text, wholeSeconds(v.reset), 10)
		add(headerRetryAfter)
	}
	values := string(text)
	h := b.headerPtrs[:n]
	start := 0
	for i := range n {
		b.headers[i].Value = values[start:ends[i]]
		h[i], start = &b.headers[i], ends[i]
	}
	return h
}

// appendSeconds formats d in seconds with up to three decimals, rounded up
// so that a client waiting that long is never early: 1.5, 0.755, 2.
func appendSeconds(b []byte, d time.Duration) []byte {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	b = strconv.AppendInt(b, int64(ms/1000), 10)
	if frac := int64(ms % 1000); frac != 0 {
		b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
		for b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
	}
	return b
}

// overLimitBody is a domain's over_limit_body with its placeholder filled
// in: the whole seconds until a retry can pass, as Retry-After.
func overLimitBody(body string, reset time.Duration) []byte {
	return []byte(strings.ReplaceAll(body, descriptors.OverLimitBodyRetryAfter, strconv.FormatInt(wholeSeconds(reset), 10)))
}

// wholeSeconds rounds d up to whole seconds, at least 1: Retry-After has no
// fractions, and 0 would invite an immediate retry.
func wholeSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}
