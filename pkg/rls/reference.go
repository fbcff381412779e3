package rls

import (
	"math"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// ReferenceHeaderNames name the headers of EnvoyproxyHeaders, as
// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER do; an empty name is the reference's default.
type ReferenceHeaderNames struct {
	Limit, Remaining, Reset string
}

// withDefaults fills in the reference's default names.
func (n ReferenceHeaderNames) withDefaults() ReferenceHeaderNames {
	if n.Limit == "" {
		n.Limit = "RateLimit-Limit"
	}
	if n.Remaining == "" {
		n.Remaining = "RateLimit-Remaining"
	}
	if n.Reset == "" {
		n.Reset = "RateLimit-Reset"
	}
	return n
}

// referenceHeaders are envoyproxy/ratelimit's response headers: the limit,
// what remains and the whole seconds until the reset of one descriptor's
// limit, on every answer. The descriptor is the one with the least
// remaining (the first of a tie), unless a descriptor is over a limit not
// in quota mode: then the last such one. The reset is its
// duration_until_reset in whole seconds, rounded up.
func (s *Service) referenceHeaders(b *response, w *work) []*corev3.HeaderValue {
	pick := -1
	least := uint32(math.MaxUint32)
	for i := range b.statuses {
		st := &b.statuses[i].st
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = i, st.LimitRemaining
		}
	}
	for i := range w.verdicts {
		if w.verdicts[i].overRegular {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	// Its duration_until_reset is already a fixed window's time to its end.
	st := &b.statuses[pick].st
	reset := st.GetDurationUntilReset().AsDuration()
	names := s.refHeaders
	b.headers[0] = corev3.HeaderValue{Key: names.Limit, Value: strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)}
	b.headers[1] = corev3.HeaderValue{Key: names.Remaining, Value: strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)}
	b.headers[2] = corev3.HeaderValue{Key: names.Reset, Value: strconv.FormatInt(roundUpSeconds(reset), 10)}
	h := b.headerPtrs[:3]
	for i := range h {
		h[i] = &b.headers[i]
	}
	return h
}

// dynamicMetadata is the response's dynamic metadata as envoyproxy/ratelimit
// builds it with RESPONSE_DYNAMIC_METADATA: the domain, each descriptor's
// entries ("key=value") and own hits_addend, the request's hits_addend, and
// the metadata of the limits of the descriptors that passed, merged: the
// first value of a key wins, mappings merging key by key. Within a
// descriptor, deeper levels come first. Envoy can then route a request to
// a backend that still has quota (%DYNAMIC_METADATA(envoy.filters.http.ratelimit:...)%).
func dynamicMetadata(domain *descriptors.Domain, req *rlsv3.RateLimitRequest, w *work, b *response) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(domain.Name)}
	descs := make([]*structpb.Value, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs[i] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := map[string]*structpb.Value{}
	for i := range b.statuses {
		if w.unlimited[i] || b.statuses[i].st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		for j := w.starts[i+1] - 1; j >= w.starts[i]; j-- {
			if k := w.bucketOf[j]; k >= 0 && !w.skipped[k] { // not replaced, and checked
				mergeMetadata(merged, w.levels[j].Rule.Metadata)
			}
		}
	}
	if len(merged) > 0 {
		fields["metadata"] = structpb.NewStructValue(&structpb.Struct{Fields: merged})
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src to dst: a key dst lacks is added, a mapping both
// hold is merged key by key, and any other key keeps dst's value. dst is
// the response's own; src, a rule's, is only read.
func mergeMetadata(dst map[string]*structpb.Value, src map[string]any) {
	for k, v := range src {
		old, ok := dst[k]
		if !ok {
			if nv, err := structpb.NewValue(v); err == nil {
				dst[k] = nv
			}
			continue
		}
		if m, isMap := v.(map[string]any); isMap && old.GetStructValue() != nil {
			mergeMetadata(old.GetStructValue().Fields, m)
		}
	}
}
