package ui

import (
	"net"
	"net/http"
	"strings"
)

// Origins are the origins a browser may change state from: the admin
// address's own.
type Origins struct {
	// Addr is the address the admin server listens on (host:port). On a
	// loopback address, the page may be opened as localhost, 127.0.0.1 or
	// [::1] on its port; on every address (0.0.0.0, [::]), by whatever name
	// the request's Host gives.
	Addr string
}

// allows reports whether origin (scheme://host:port) is the admin
// address's own, for a request to host.
func (o Origins) allows(origin, host string) bool {
	rest, ok := strings.CutPrefix(origin, "http://")
	if !ok || o.Addr == "" {
		return false
	}
	h, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return false
	}
	if rest == o.Addr {
		return true
	}
	ip := net.ParseIP(h)
	switch {
	case h == "localhost" || ip != nil && ip.IsLoopback():
		for _, name := range []string{"localhost", "127.0.0.1", "[::1]"} {
			if rest == name+":"+port {
				return true
			}
		}
	case h == "" || ip != nil && ip.IsUnspecified():
		_, hostPort, err := net.SplitHostPort(host)
		return err == nil && hostPort == port && rest == host
	}
	return false
}

// SameOrigin passes requests to h, but refuses with 403 one that may
// change state (any method but GET, HEAD and OPTIONS) sent from another
// origin: with an Origin header not of origins, or a Sec-Fetch-Site header
// other than same-origin or none (typed in, or a tool). A request with
// neither header, from a script or curl, passes.
func SameOrigin(h http.Handler, origins Origins) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			h.ServeHTTP(w, r)
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			writeError(w, http.StatusForbidden, "cross-origin request refused (Sec-Fetch-Site: "+site+"): the admin endpoints change state only from the admin address's own page")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !origins.allows(origin, r.Host) {
			writeError(w, http.StatusForbidden, "cross-origin request refused (Origin: "+origin+"): the admin endpoints change state only from the admin address's own page, http://"+origins.Addr)
			return
		}
		h.ServeHTTP(w, r)
	})
}
