package rlqs

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The stream reads its reports and writes its answers with protowire, not
// through the generated types: a report's cost is its buckets, and
// protobuf-go decodes each BucketId (a map) by reflection into a map of its
// own, which was a quarter of a report's time; an answer repeats each
// BucketId, encoded again. Here a BucketId stays the bytes its Envoy sent:
// a known bucket is found by them without reading its pairs, and its
// answer sends them back as they came, beside an assignment encoded once
// while it holds. The field numbers are those of
// envoy/service/rate_limit_quota/v3/rlqs.proto and
// envoy/type/v3/{ratelimit_strategy,token_bucket}.proto; tests hold both
// ends to the generated types.

// report is a RateLimitQuotaUsageReports as read.
type report struct {
	domain string
	usages []usageReport
}

// usageReport is one BucketQuotaUsage of a report.
type usageReport struct {
	id      []byte // the BucketId as encoded by the Envoy: a slice of the message
	elapsed int64  // time_elapsed, whole seconds (Envoy sends no nanoseconds)
	allowed uint64
	denied  uint64
}

// The field numbers read and written.
const (
	reportsDomain   = 1 // RateLimitQuotaUsageReports.domain
	reportsUsages   = 2 // .bucket_quota_usages
	usageBucketID   = 1 // BucketQuotaUsage.bucket_id
	usageElapsed    = 2 // .time_elapsed
	usageAllowed    = 3 // .num_requests_allowed
	usageDenied     = 4 // .num_requests_denied
	bucketIDBucket  = 1 // BucketId.bucket (map<string, string>: entries of key 1, value 2)
	durationSeconds = 1 // google.protobuf.Duration.seconds

	responseActions   = 1 // RateLimitQuotaResponse.bucket_action
	actionBucketID    = 1 // BucketAction.bucket_id
	actionAssignment  = 2 // .quota_assignment_action
	actionAbandon     = 3 // .abandon_action
	assignmentTTL     = 2 // QuotaAssignmentAction.assignment_time_to_live
	assignmentRule    = 3 // .rate_limit_strategy
	strategyBlanket   = 1 // RateLimitStrategy.blanket_rule
	strategyToken     = 3 // .token_bucket
	tokenMax          = 1 // TokenBucket.max_tokens
	tokenPerFill      = 2 // .tokens_per_fill (UInt32Value, its value field 1)
	tokenFillInterval = 3 // .fill_interval

	blanketAllowAll = 0 // RateLimitStrategy.BlanketRule ALLOW_ALL
	blanketDenyAll  = 1 // DENY_ALL
)

// parseReport reads a RateLimitQuotaUsageReports. Its usages' BucketIds
// are slices of b. A message that is not one (a field of the wrong wire
// type, cut short, a string not UTF-8) is an error saying where; fields
// it does not know are skipped, and a field given twice counts as protobuf
// counts it (the last scalar; messages merged).
func parseReport(b []byte) (*report, error) {
	return parseReportInto(b, &report{})
}

// parseReportInto is parseReport into r, whose usages' space it reuses.
func parseReportInto(b []byte, r *report) (*report, error) {
	r.domain, r.usages = "", r.usages[:0]
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == reportsDomain && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return fmt.Errorf("the domain is not UTF-8")
			}
			r.domain = string(v)
		case num == reportsUsages && typ == protowire.BytesType:
			u, err := parseUsage(v)
			if err != nil {
				return fmt.Errorf("bucket %d: %w", len(r.usages), err)
			}
			r.usages = append(r.usages, u)
		case num == reportsDomain, num == reportsUsages:
			return fmt.Errorf("field %d of wire type %d", num, typ)
		}
		return nil
	})
	return r, err
}

func parseUsage(b []byte) (usageReport, error) {
	var u usageReport
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == usageBucketID && typ == protowire.BytesType:
			if u.id != nil {
				// Given twice: protobuf merges the two, as one message of
				// both encodings.
				u.id = append(append([]byte(nil), u.id...), v...)
			} else {
				u.id = v
			}
		case num == usageElapsed && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if num == durationSeconds && typ == protowire.VarintType {
					u.elapsed = int64(n)
				}
				return nil
			})
		case num == usageAllowed && typ == protowire.VarintType:
			u.allowed = n
		case num == usageDenied && typ == protowire.VarintType:
			u.denied = n
		case num >= usageBucketID && num <= usageDenied:
			return fmt.Errorf("field %d of wire type %d", num, typ)
		}
		return nil
	})
	if err == nil && u.id == nil {
		u.id = []byte{} // no BucketId: no pairs, refused as such
	}
	return u, err
}

// parsePairs reads a BucketId's pairs. A key given twice keeps its last
// value, as a protobuf map does.
func parsePairs(id []byte) (map[string]string, error) {
	pairs := map[string]string{}
	err := walk(id, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != bucketIDBucket {
			return nil
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d of wire type %d", num, typ)
		}
		var key, value []byte
		err := walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			switch {
			case (num == 1 || num == 2) && typ != protowire.BytesType:
				return fmt.Errorf("a pair's field %d of wire type %d", num, typ)
			case num == 1:
				key = v
			case num == 2:
				value = v
			}
			return nil
		})
		switch {
		case err != nil:
			return err
		case !utf8.Valid(key) || !utf8.Valid(value):
			return fmt.Errorf("a key or value is not UTF-8")
		}
		pairs[string(key)] = string(value)
		return nil
	})
	return pairs, err
}

// walk calls f for each field of a message: its number, wire type, and
// its bytes (BytesType) or value (VarintType, Fixed32Type, Fixed64Type).
// Groups are skipped whole.
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return fmt.Errorf("a field tag: %w", protowire.ParseError(l))
		}
		b = b[l:]
		var (
			v []byte
			n uint64
		)
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, l = protowire.ConsumeFixed32(b)
			n = uint64(x)
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// maxActionTail is the most bytes a BucketAction takes beside its
// BucketId's: the tags and lengths, a TTL and a token bucket of the
// largest values.
const maxActionTail = 64

// appendAction appends one BucketAction, as field bucket_action of a
// RateLimitQuotaResponse: the BucketId as the Envoy sent it, and the
// assignment, or an abandon if abandon.
func appendAction(b, id []byte, a Assignment, abandon bool) []byte {
	var inner [64]byte
	var body []byte
	if abandon {
		body = protowire.AppendTag(inner[:0], actionAbandon, protowire.BytesType)
		body = protowire.AppendVarint(body, 0)
	} else {
		body = appendAssignment(inner[:0], a)
	}
	size := protowire.SizeTag(actionBucketID) + protowire.SizeBytes(len(id)) + len(body)
	b = protowire.AppendTag(b, responseActions, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, actionBucketID, protowire.BytesType)
	b = protowire.AppendBytes(b, id)
	return append(b, body...)
}

// appendAssignment appends the quota_assignment_action field of a
// BucketAction: the TTL and the rule.
func appendAssignment(b []byte, a Assignment) []byte {
	var ttl, rule [48]byte
	t := appendDuration(ttl[:0], assignmentTTL, a.TTL)
	var s []byte
	switch a.Kind {
	case AllowAll, DenyAll:
		blanket := uint64(blanketAllowAll)
		if a.Kind == DenyAll {
			blanket = blanketDenyAll
		}
		s = protowire.AppendTag(rule[:0], strategyBlanket, protowire.VarintType)
		s = protowire.AppendVarint(s, blanket)
	default:
		var tb [32]byte
		x := tb[:0]
		if a.MaxTokens != 0 {
			x = protowire.AppendTag(x, tokenMax, protowire.VarintType)
			x = protowire.AppendVarint(x, uint64(a.MaxTokens))
		}
		// tokens_per_fill is a wrapper: present even when 0, which a
		// missing one would not say.
		var w []byte
		if a.TokensPerFill != 0 {
			w = protowire.AppendTag(nil, 1, protowire.VarintType)
			w = protowire.AppendVarint(w, uint64(a.TokensPerFill))
		}
		x = protowire.AppendTag(x, tokenPerFill, protowire.BytesType)
		x = protowire.AppendBytes(x, w)
		x = appendDuration(x, tokenFillInterval, a.FillInterval)
		s = protowire.AppendTag(rule[:0], strategyToken, protowire.BytesType)
		s = protowire.AppendBytes(s, x)
	}
	size := len(t) + protowire.SizeTag(assignmentRule) + protowire.SizeBytes(len(s))
	b = protowire.AppendTag(b, actionAssignment, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = append(b, t...)
	b = protowire.AppendTag(b, assignmentRule, protowire.BytesType)
	return protowire.AppendBytes(b, s)
}

// appendDuration appends a google.protobuf.Duration of whole seconds as
// field num (present even when 0).
func appendDuration(b []byte, num protowire.Number, seconds int64) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	if seconds == 0 {
		return protowire.AppendVarint(b, 0)
	}
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(durationSeconds)+protowire.SizeVarint(uint64(seconds))))
	b = protowire.AppendTag(b, durationSeconds, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(seconds))
}
