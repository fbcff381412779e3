package rls

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/pprof"
	runtimepprof "runtime/pprof"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxJSONBody bounds the body of POST /json: larger is 413. A megabyte
// holds far more than the request caps let through.
const MaxJSONBody = 1 << 20

// HTTPHandler serves the service's public HTTP endpoints:
//
//	GET  /healthz      200 while the process answers (liveness)
//	GET  /readyz       200 while hs reports SERVING, else 503 (readiness)
//	GET  /healthcheck  200 "OK" while hs reports SERVING, else 500: the
//	                   probe envoyproxy/ratelimit serves, which Envoy Gateway
//	                   and Istio's sample use
//	GET  /metrics  metrics, if a handler is given
//	POST /json     a RateLimitRequest in protojson: 200 with the response
//	               when OK, 429 when over the limit, 400 for bad input,
//	               413 beyond MaxJSONBody; 404 unless json is set
//
// The admin endpoints are on AdminHandler, on a port of their own.
func HTTPHandler(svc *Service, hs *health.Server, metrics http.Handler, json bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !serving(r, hs) {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if !serving(r, hs) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte("OK"))
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	if json {
		mux.Handle("POST /json", svc.httpTracing(http.HandlerFunc(svc.serveJSON), "POST /json"))
	} else {
		mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
			writeJSONError(w, http.StatusNotFound, "POST /json is off: the gRPC port requires client certificates, which HTTP does not check (-http-json=true turns it on)")
		})
	}
	return mux
}

// serving reports whether hs says the server serves.
func serving(r *http.Request, hs *health.Server) bool {
	resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// AdminHandler serves the endpoints for operators, which belong on a
// private address:
//
//	GET    /config        the config in force, as JSON
//	POST   /explain       a RateLimitRequest as for POST /json: how it would
//	                      be decided now, and why, charging nothing
//	GET    /buckets       ?domain=D&descriptor=k=v,k=v (repeated for more):
//	                      the state of the buckets the descriptors reach
//	DELETE /buckets       the same query: resets those buckets
//	GET    /debug/pprof/  Go's profiles, if profiles is set (not cmdline,
//	                      which would show a password given on the command line)
//
// /explain and /buckets read and reset buckets: unless buckets is set, they
// answer 404 saying so.
func AdminHandler(svc *Service, profiles, buckets bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config", svc.serveConfig)
	explain, state := svc.serveExplain, svc.serveBuckets
	if !buckets {
		off := func(w http.ResponseWriter, r *http.Request) {
			writeJSONError(w, http.StatusNotFound, r.URL.Path+" is off: the gRPC port requires client certificates, which the admin server does not check (-admin-buckets=true turns it on)")
		}
		explain, state = off, off
	}
	mux.HandleFunc("POST /explain", explain)
	mux.HandleFunc("GET /buckets", state)
	mux.HandleFunc("DELETE /buckets", state)
	if profiles {
		mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/debug/pprof/":
				profileIndex(w)
			case "/debug/pprof/cmdline":
				http.NotFound(w, r)
			default:
				pprof.Index(w, r) // serves the named profile
			}
		})
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// profileIndex lists the profiles served: pprof.Index's own page links
// cmdline, which is not served.
func profileIndex(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, "<html><body><p>Profiles (add ?debug=1 for text):</p><ul>\n")
	for _, p := range runtimepprof.Profiles() {
		fmt.Fprintf(w, "<li><a href=\"%[1]s?debug=1\">%[1]s</a> (%[2]d)</li>\n", html.EscapeString(p.Name()), p.Count())
	}
	fmt.Fprint(w, "<li><a href=\"profile\">profile</a>: CPU, ?seconds=30</li>\n<li><a href=\"trace\">trace</a>: execution trace, ?seconds=1</li>\n</ul></body></html>\n")
}

// serveJSON answers a RateLimitRequest given as JSON, as envoyproxy/ratelimit
// does, with the response headers set on the HTTP response too.
func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r)
	if !ok {
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), req)
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

// readRequest reads a RateLimitRequest in protojson from the body of r,
// of at most MaxJSONBody bytes, or answers why it cannot.
func readRequest(w http.ResponseWriter, r *http.Request) (*rlsv3.RateLimitRequest, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return nil, false
	}
	return parseRequest(w, body)
}

// readBody reads a request's body, at most MaxJSONBody bytes, answering
// the error if it cannot.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", MaxJSONBody))
		return nil, false
	case err != nil:
		writeJSONError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return nil, false
	}
	return body, true
}

// parseRequest reads a RateLimitRequest in JSON, answering the error if
// it cannot.
func parseRequest(w http.ResponseWriter, body []byte) (*rlsv3.RateLimitRequest, bool) {
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "the body is not a RateLimitRequest in JSON: "+err.Error())
		return nil, false
	}
	return &req, true
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
	case codes.Unimplemented:
		return http.StatusNotImplemented
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
