package rls

import (
	"cmp"
	"math"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// The default request caps. A legitimate Envoy request carries a few
// descriptors of a few short entries; the caps bound the work and memory a
// hostile one can cost, with room to spare for the legitimate.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 32
	DefaultMaxEntryBytes  = 4096
)

// caps bound the size of a request.
type caps struct {
	descriptors, entries, entryBytes int
	// buckets bounds the distinct buckets of one request, and so of one
	// store call (one Redis script call per hash slot holds at most as
	// many): descriptors × entries, since a descriptor resolves to at most
	// one level per entry (an override takes the deepest level's place, or
	// is the only one). Within the other caps it cannot be exceeded; it is
	// checked anyway, so that a change to resolution cannot make a request
	// send the store more.
	buckets int
}

// newCaps returns the caps, a 0 standing for the default.
func newCaps(descriptors, entries, entryBytes int) caps {
	c := caps{
		descriptors: cmp.Or(descriptors, DefaultMaxDescriptors),
		entries:     cmp.Or(entries, DefaultMaxEntries),
		entryBytes:  cmp.Or(entryBytes, DefaultMaxEntryBytes),
	}
	c.buckets = c.descriptors * c.entries
	return c
}

// checkBuckets refuses a request that reaches more than c.buckets buckets.
func (c caps) checkBuckets(n int) error {
	if n > c.buckets {
		return badRequest("request reaches %d buckets: at most %d allowed (-max-descriptors × -max-entries)", n, c.buckets)
	}
	return nil
}

// validate reports the first malformed part of a request, or the first
// part beyond a cap, naming it. It reads the request once, before any
// other work.
func (c caps) validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return badRequest("domain is empty")
	}
	if n := len(req.GetDomain()); n > c.entryBytes {
		return badRequest("domain is %d bytes: at most %d allowed (-max-entry-bytes)", n, c.entryBytes)
	}
	if len(req.GetDescriptors()) == 0 {
		return badRequest("request has no descriptors")
	}
	if n := len(req.GetDescriptors()); n > c.descriptors {
		return badRequest("request has %d descriptors: at most %d allowed (-max-descriptors)", n, c.descriptors)
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return badRequest("descriptors[%d] has no entries", i)
		}
		if n := len(d.GetEntries()); n > c.entries {
			return badRequest("descriptors[%d] has %d entries: at most %d allowed (-max-entries)", i, n, c.entries)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return badRequest("descriptors[%d].entries[%d] has an empty key", i, j)
			}
			if n := len(e.GetKey()); n > c.entryBytes {
				return badRequest("descriptors[%d].entries[%d].key is %d bytes: at most %d allowed (-max-entry-bytes)", i, j, n, c.entryBytes)
			}
			if n := len(e.GetValue()); n > c.entryBytes {
				return badRequest("descriptors[%d].entries[%d].value is %d bytes: at most %d allowed (-max-entry-bytes)", i, j, n, c.entryBytes)
			}
		}
		if o := d.GetLimit(); o != nil {
			if _, ok := overrideUnits[o.GetUnit()]; !ok {
				return badRequest("descriptors[%d].limit has unit %s: want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", i, o.GetUnit())
			}
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() == 0 {
				return badRequest("descriptors[%d].limit has unit_multiplier 0: want at least 1", i)
			}
		}
	}
	return nil
}

// overrideUnits maps the units of a limit sent by Envoy (envoy.type.v3,
// which has no WEEK) to leaky units.
var overrideUnits = map[typev3.RateLimitUnit]limit.Unit{
	typev3.RateLimitUnit_SECOND: limit.Second,
	typev3.RateLimitUnit_MINUTE: limit.Minute,
	typev3.RateLimitUnit_HOUR:   limit.Hour,
	typev3.RateLimitUnit_DAY:    limit.Day,
	typev3.RateLimitUnit_MONTH:  limit.Month,
	typev3.RateLimitUnit_YEAR:   limit.Year,
}

// responseUnits maps leaky units to the response's enum, whose WEEK is 7.
var responseUnits = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	limit.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	limit.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	limit.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	limit.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	limit.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	limit.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	limit.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// overrideRule turns a validated limit sent by Envoy into a rule, charged
// as the domain's file says (always: whatever the answer), translated
// as a rate_limit of its domain's files is: to the domain's algorithm, or
// to a calendar window where the file says calendar: true.
func overrideRule(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, d *descriptors.Domain) *descriptors.Rule {
	rate := limit.Rate{
		RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit:            overrideUnits[o.GetUnit()],
		Multiplier:      o.GetUnitMultiplier().GetValue(),
	}
	l, ok := rate.CalendarLimit(d.TimeZone)
	if !ok || !d.RateLimitCalendar {
		l = rate.LimitAs(d.RateLimitAlgorithm)
	}
	return &descriptors.Rule{Path: "(limit sent by Envoy)", Limit: l, Rate: rate, Always: d.Charge == descriptors.ChargeAlways}
}

// hitsOf returns the hits a descriptor adds: its own hits_addend if set
// (0 is a check without charge), else the request's (0 means 1), negated
// when Envoy gives hits back.
func hitsOf(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int64 {
	var hits int64
	if h := d.GetHitsAddend(); h != nil {
		hits = int64(min(h.GetValue(), math.MaxInt64))
	} else {
		hits = int64(max(req.GetHitsAddend(), 1))
	}
	if d.GetIsNegativeHits() {
		return -hits
	}
	return hits
}

// entriesOf copies a descriptor's entries into dst.
func entriesOf(d *ratelimitv3.RateLimitDescriptor, dst []descriptors.Entry) []descriptors.Entry {
	for _, e := range d.GetEntries() {
		dst = append(dst, descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	return dst
}
