package rls

import (
	"encoding/json"
	"errors"
	"net/http"

	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// serveExplain answers POST /explain: the request as for POST /json, its
// explanation as JSON (Explanation), charging nothing; for an RLQS bucket
// (bucket_id) with its subscribers (QuotaExplanation).
func (s *Service) serveExplain(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, br, err := s.asBucketRequest(body)
	switch {
	case err != nil:
		s.writeError(w, err)
		return
	case br == nil:
		if req, ok = parseRequest(w, body); !ok {
			return
		}
	}
	e, err := s.Explain(r.Context(), req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if br != nil {
		s.writeJSON(w, &QuotaExplanation{Explanation: e, Bucket: br.BucketID.Bucket, Subscribers: s.subscribers(br.Domain, br.BucketID.Bucket, br.Subscribers == "all")})
		return
	}
	s.writeJSON(w, e)
}

// serveBuckets answers GET /buckets (the state of the buckets the
// descriptors reach, Buckets) and DELETE /buckets (resets them, Reset),
// for ?domain=D&descriptor=k=v,k=v[&descriptor=...].
func (s *Service) serveBuckets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	domain, written := q.Get("domain"), q["descriptor"]
	if b := q.Get("bucket"); b != "" && r.Method == http.MethodGet {
		s.serveBucketQuotas(w, r, domain, b)
		return
	}
	if len(written) == 0 {
		writeJSONError(w, http.StatusBadRequest, "no descriptor: want ?domain=D&descriptor=key=value[,key=value...], or ?domain=D&bucket=key=value[,key=value...] for an RLQS bucket")
		return
	}
	descs := make([][]descriptors.Entry, 0, len(written))
	for _, d := range written {
		es, err := ParseDescriptor(d)
		if err != nil {
			s.writeError(w, err)
			return
		}
		descs = append(descs, es)
	}
	var (
		answer any
		err    error
	)
	if r.Method == http.MethodDelete {
		answer, err = s.ResetBuckets(r.Context(), domain, descs)
	} else {
		answer, err = s.Buckets(r.Context(), domain, descs)
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, answer)
}

// serveBucketQuotas answers GET /buckets?domain=D&bucket=k=v,...: an RLQS
// bucket's levels and subscribers.
func (s *Service) serveBucketQuotas(w http.ResponseWriter, r *http.Request, domain, written string) {
	bucket, err := parseBucket(written)
	if err != nil {
		s.writeError(w, err)
		return
	}
	all, err := subscribersAll(r.URL.Query().Get("subscribers"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	answer, err := s.BucketSubscribers(r.Context(), domain, bucket, all)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, answer)
}

// writeError answers an error of the service with its HTTP status and
// the message a gRPC caller would get.
func (s *Service) writeError(w http.ResponseWriter, err error) {
	st := status.Convert(grpcStatus(err))
	writeJSONError(w, httpStatus(st.Code()), st.Message())
}

// writeJSON answers v as indented JSON.
func (s *Service) writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		s.log.Debug("writing an admin answer", "err", err)
	}
}
