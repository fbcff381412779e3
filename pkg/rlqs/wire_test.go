package rlqs

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestParseReportReadsWhatEnvoySends: reports encoded by the generated
// types (as an Envoy's protobuf library writes them) read back field for
// field, whatever else they hold.
func TestParseReportReadsWhatEnvoySends(t *testing.T) {
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge é", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": "alice", "action": "trade"}}, TimeElapsed: durationpb.New(5 * time.Second),
			NumRequestsAllowed: 7, NumRequestsDenied: 1 << 40},
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"": "", "k": "v=,\\"}}},
		{},
	}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// Fields a newer Envoy might send are skipped, at every depth.
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	r, err := parseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.domain != "edge é" || len(r.usages) != 3 {
		t.Fatalf("domain %q, %d usages", r.domain, len(r.usages))
	}
	for i, u := range m.BucketQuotaUsages {
		got := r.usages[i]
		pairs, err := parsePairs(got.id)
		if err != nil {
			t.Fatalf("usage %d: %v", i, err)
		}
		if !maps.Equal(pairs, u.GetBucketId().GetBucket()) && (len(pairs) != 0 || len(u.GetBucketId().GetBucket()) != 0) {
			t.Errorf("usage %d: pairs %v, want %v", i, pairs, u.GetBucketId().GetBucket())
		}
		if got.elapsed != u.GetTimeElapsed().GetSeconds() || got.allowed != u.NumRequestsAllowed || got.denied != u.NumRequestsDenied {
			t.Errorf("usage %d: %+v, want %v", i, got, u)
		}
	}
}

// TestParseReportRefuses: what is not a report is an error saying where,
// never a panic; a field given twice counts as protobuf counts it.
func TestParseReportRefuses(t *testing.T) {
	tag := func(b []byte, n protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(b, n, typ) }
	usage := func(fields ...[]byte) []byte {
		return protowire.AppendBytes(tag(nil, reportsUsages, protowire.BytesType), bytes.Join(fields, nil))
	}
	pair := func(k, v string) []byte {
		e := protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte(k))
		e = protowire.AppendBytes(tag(e, 2, protowire.BytesType), []byte(v))
		return protowire.AppendBytes(tag(nil, bucketIDBucket, protowire.BytesType), e)
	}
	id := func(pairs ...[]byte) []byte {
		return protowire.AppendBytes(tag(nil, usageBucketID, protowire.BytesType), bytes.Join(pairs, nil))
	}
	for name, c := range map[string]struct {
		msg  []byte
		want string
	}{
		"cut tag":          {[]byte{0x80}, "a field tag"},
		"cut length":       {tag(nil, reportsDomain, protowire.BytesType), "field 1"},
		"domain a number":  {protowire.AppendVarint(tag(nil, reportsDomain, protowire.VarintType), 3), "field 1 of wire type 0"},
		"domain not UTF-8": {protowire.AppendBytes(tag(nil, reportsDomain, protowire.BytesType), []byte{0xff}), "not UTF-8"},
		"allowed as bytes": {usage(protowire.AppendBytes(tag(nil, usageAllowed, protowire.BytesType), nil)), "bucket 0: field 3 of wire type 2"},
		"cut usage":        {append(tag(nil, reportsUsages, protowire.BytesType), 5, 1), "field 2"},
		"bad group":        {tag(nil, 7, protowire.StartGroupType), "field 7"},
	} {
		if _, err := parseReport(c.msg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		id   []byte
		want string
	}{
		"pair a number":   {protowire.AppendVarint(tag(nil, bucketIDBucket, protowire.VarintType), 1), "field 1 of wire type 0"},
		"key a number":    {protowire.AppendBytes(tag(nil, bucketIDBucket, protowire.BytesType), protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1)), "a pair's field 1"},
		"value not UTF-8": {pair("k", "\xff"), "not UTF-8"},
		"cut pair":        {append(tag(nil, bucketIDBucket, protowire.BytesType), 9), "field 1"},
	} {
		if _, err := parsePairs(c.id); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	// Twice: the last value of a key, the last count; two BucketIds merge.
	msg := usage(id(pair("k", "1"), pair("k", "2")), protowire.AppendVarint(tag(nil, usageAllowed, protowire.VarintType), 1),
		protowire.AppendVarint(tag(nil, usageAllowed, protowire.VarintType), 9), id(pair("j", "x")))
	r, err := parseReport(msg)
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := parsePairs(r.usages[0].id)
	if err != nil || fmt.Sprint(pairs) != "map[j:x k:2]" || r.usages[0].allowed != 9 {
		t.Fatalf("pairs %v (%v), allowed %d; want map[j:x k:2], 9", pairs, err, r.usages[0].allowed)
	}
	// The typed decoder agrees.
	typed := &rlqsv3.RateLimitQuotaUsageReports{}
	if err := proto.Unmarshal(msg, typed); err != nil || fmt.Sprint(typed.BucketQuotaUsages[0].GetBucketId().GetBucket()) != "map[j:x k:2]" {
		t.Fatalf("the generated decoder: %v, %v", typed, err)
	}
}

// TestAppendActionIsWhatTheTypesWrite: every answer read back by the
// generated types is the action the service means, field for field.
func TestAppendActionIsWhatTheTypesWrite(t *testing.T) {
	idMsg := &rlqsv3.BucketId{Bucket: map[string]string{"user": "alice", "x": ""}}
	id, err := proto.Marshal(idMsg)
	if err != nil {
		t.Fatal(err)
	}
	assignment := func(ttl int64, s *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
		return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: idMsg, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(time.Duration(ttl) * time.Second), RateLimitStrategy: s}}}
	}
	blanket := func(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
	}
	tokens := func(max, per uint32, fill int64) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: max, TokensPerFill: wrapperspb.UInt32(per), FillInterval: durationpb.New(time.Duration(fill) * time.Second)}}}
	}
	for i, c := range []struct {
		a       Assignment
		abandon bool
		want    *rlqsv3.RateLimitQuotaResponse_BucketAction
	}{
		{Assignment{Kind: TokenBucket, MaxTokens: 36, TokensPerFill: 352, FillInterval: 10, TTL: 3}, false, assignment(3, tokens(36, 352, 10))},
		{Assignment{Kind: TokenBucket, MaxTokens: 4294967295, TokensPerFill: 4294967295, FillInterval: 3600, TTL: 300}, false, assignment(300, tokens(4294967295, 4294967295, 3600))},
		{Assignment{Kind: TokenBucket, MaxTokens: 1, TokensPerFill: 0, FillInterval: 1, TTL: 0}, false, assignment(0, tokens(1, 0, 1))},
		{Assignment{Kind: AllowAll, TTL: 5}, false, assignment(5, blanket(typev3.RateLimitStrategy_ALLOW_ALL))},
		{Assignment{Kind: DenyAll, TTL: 15}, false, assignment(15, blanket(typev3.RateLimitStrategy_DENY_ALL))},
		{Assignment{}, true, &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: idMsg, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}},
	} {
		msg := appendAction(appendAction(nil, id, c.a, c.abandon), id, c.a, c.abandon) // two actions in one answer
		got := &rlqsv3.RateLimitQuotaResponse{}
		if err := proto.Unmarshal(msg, got); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{c.want, c.want}}
		if !proto.Equal(got, want) {
			t.Errorf("step %d: %v\nwant %v", i, got, want)
		}
		// A present but zero tokens_per_fill is still present: Envoy reads
		// a missing one as 1.
		if tb := got.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil && tb.TokensPerFill == nil {
			t.Errorf("step %d: tokens_per_fill missing", i)
		}
	}
}

// FuzzParseReport: nothing a client sends makes the reader panic, and
// what it reads of a message the generated decoder accepts agrees.
func FuzzParseReport(f *testing.F) {
	seed, _ := proto.Marshal(&rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"a": "b", "c": "d"}}, NumRequestsAllowed: 3, TimeElapsed: durationpb.New(time.Second)}}})
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseReport(b)
		typed := &rlqsv3.RateLimitQuotaUsageReports{}
		if proto.Unmarshal(b, typed) != nil || err != nil {
			return
		}
		if r.domain != typed.Domain || len(r.usages) != len(typed.BucketQuotaUsages) {
			t.Fatalf("domain %q, %d usages; the generated decoder: %q, %d", r.domain, len(r.usages), typed.Domain, len(typed.BucketQuotaUsages))
		}
		for i, u := range typed.BucketQuotaUsages {
			pairs, err := parsePairs(r.usages[i].id)
			if err != nil {
				continue // a UTF-8 check the generated decoder makes only on strings it keeps
			}
			if r.usages[i].allowed != u.NumRequestsAllowed || r.usages[i].denied != u.NumRequestsDenied ||
				(len(pairs) > 0 || len(u.GetBucketId().GetBucket()) > 0) && !maps.Equal(pairs, u.GetBucketId().GetBucket()) {
				t.Fatalf("usage %d: %v %+v; the generated decoder: %v", i, pairs, r.usages[i], u)
			}
		}
	})
}

// TestActionTailBound: an action of the largest values takes at most
// maxActionTail bytes beside its BucketId, which answers are sized by.
func TestActionTailBound(t *testing.T) {
	id := make([]byte, 300) // a length of two bytes
	for _, a := range []Assignment{
		{Kind: TokenBucket, MaxTokens: math.MaxUint32, TokensPerFill: math.MaxUint32, FillInterval: math.MaxInt64, TTL: math.MaxInt64},
		{Kind: DenyAll, TTL: math.MaxInt64},
	} {
		if n := len(appendAction(nil, id, a, false)) - len(id); n > maxActionTail {
			t.Errorf("%+v: %d bytes beside the BucketId, more than %d", a, n, maxActionTail)
		}
	}
}
