package rls

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds the body of POST /json.
const maxJSONBody = 1 << 20

// HTTPHandler serves the service's HTTP endpoints:
//
//	GET  /healthz  200 while the process answers (liveness)
//	GET  /readyz   200 while hs reports SERVING, else 503 (readiness)
//	GET  /metrics  metrics, if a handler is given
//	POST /json     a RateLimitRequest in protojson: 200 with the response
//	               when OK, 429 when over the limit, 400 for bad input
//	GET  /config   the config in force, as JSON
func HTTPHandler(svc *Service, hs *health.Server, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("POST /json", svc.serveJSON)
	mux.HandleFunc("GET /config", svc.serveConfig)
	return mux
}

// serveJSON answers a RateLimitRequest given as JSON, as envoyproxy/ratelimit
// does, with the response headers set on the HTTP response too.
func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "the body is not a RateLimitRequest in JSON: "+err.Error())
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		st := status.Convert(err)
		writeJSONError(w, httpStatus(st.Code()), st.Message())
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		w.Header().Add(h.GetKey(), h.GetValue())
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// httpStatus maps the service's gRPC codes to HTTP.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unavailable, codes.Canceled:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (s *Service) serveConfig(w http.ResponseWriter, r *http.Request) {
	cfg := s.Config()
	if cfg == nil {
		writeJSONError(w, http.StatusServiceUnavailable, "no config loaded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg.Describe()); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		s.log.Debug("writing /config", "err", err)
	}
}
