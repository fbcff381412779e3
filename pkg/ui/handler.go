package ui

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/bucketkey"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

//go:embed assets
var assets embed.FS

// RLQS is what the page shows of the Rate Limit Quota Service
// (*rlqs.Service).
type RLQS interface {
	StreamViews() []rlqs.StreamView
	LevelViews(top int) []rlqs.LevelSummary
}

// Options are what the page shows, and the admin endpoints it sits in
// front of.
type Options struct {
	Version string
	// Mode is "exact" or "local-first", SyncInterval local-first's.
	Mode         string
	SyncInterval time.Duration
	// StoreName names the store (memory, redis, memcached); Store is its
	// health check (nil: always answers).
	StoreName string
	Store     Checker
	// ConfigSource says where the config comes from ("files: PATH",
	// "xds: ADDRESS"); Config returns the config in force (nil: none yet);
	// Reloads its last load.
	ConfigSource string
	Config       func() *descriptors.Config
	Reloads      *Reloads
	Started      time.Time
	// Activity counts the decisions (nil: none shown).
	Activity *Activity
	// RLQS is the quota service (nil: none).
	RLQS RLQS
	// Regions returns every region a limit is divided among, as this
	// replica sees them (nil: no regions).
	Regions func() []region.Status
	// Admin serves every other path of the admin address (rls.AdminHandler),
	// behind SameOrigin for the methods that change state; Origins are
	// the origins that may (see SameOrigin).
	Admin   http.Handler
	Origins Origins
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// MaxRefused is how many buckets GET /ui/refused lists.
const MaxRefused = 20

// shares is how many of a level's largest shares GET /ui/rlqs lists.
const shares = 5

// pagePolicy keeps the page to its own origin: nothing loaded from
// elsewhere, never framed.
const pagePolicy = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the operator's page on the admin address: GET / and its
// files, the JSON endpoints GET /ui/status, /ui/limits, /ui/refused and
// /ui/rlqs, and every other path from o.Admin behind SameOrigin.
func Handler(o Options) (http.Handler, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Config == nil {
		o.Config = func() *descriptors.Config { return nil }
	}
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	h := &handler{o: o, files: files, health: &storeHealth{check: o.Store}}
	mux := http.NewServeMux()
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "index.html" || !plainName(e.Name()) {
			continue
		}
		mux.HandleFunc("GET /"+e.Name(), h.file(e.Name()))
	}
	mux.HandleFunc("GET /{$}", h.file("index.html"))
	mux.HandleFunc("GET /ui/status", h.status)
	mux.HandleFunc("GET /ui/limits", h.limits)
	mux.HandleFunc("GET /ui/refused", h.refused)
	mux.HandleFunc("GET /ui/rlqs", h.rlqs)
	admin := o.Admin
	if admin == nil {
		admin = http.NotFoundHandler()
	}
	mux.Handle("/", SameOrigin(admin, o.Origins))
	return mux, nil
}

// plainName reports whether an asset's name can be a path as it is:
// letters, digits, '.', '-' and '_'.
func plainName(name string) bool {
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return name != ""
}

type handler struct {
	o      Options
	files  fs.FS
	health *storeHealth
}

// file serves one embedded file.
func (h *handler) file(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", pagePolicy)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, h.files, name)
	}
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	now := h.o.Now()
	st := Status{Version: h.o.Version, Mode: h.o.Mode, Store: StoreStatus{Name: h.o.StoreName, OK: true},
		Config:  ConfigStatus{Source: h.o.ConfigSource},
		Started: h.o.Started.UTC().Format(time.RFC3339), UptimeSeconds: int64(now.Sub(h.o.Started) / time.Second)}
	if h.o.Mode == "local-first" {
		st.SyncInterval = h.o.SyncInterval.String()
	}
	if err := h.health.get(r.Context(), now); err != nil {
		st.Store.OK, st.Store.Error = false, err.Error()
	}
	if cfg := h.o.Config(); cfg != nil {
		st.Config.Domains = len(cfg.Domains())
	}
	if at, err := h.o.Reloads.Last(); !at.IsZero() {
		st.Config.LastReload, st.Config.LastError = at.UTC().Format(time.RFC3339), err
	}
	if h.o.Regions != nil {
		st.Regions = h.o.Regions()
	}
	writeJSON(w, st)
}

// Limits is GET /ui/limits: each limit's decisions per second, oldest
// first, the last of them the second End.
type Limits struct {
	StepSeconds int            `json:"step_seconds"`
	End         int64          `json:"end"`
	Domains     []DomainLimits `json:"domains"`
	// Truncated says the config has more than MaxLimits limits: those
	// past it are left out.
	Truncated bool `json:"truncated,omitempty"`
}

// MaxLimits is how many limits GET /ui/limits lists.
const MaxLimits = 500

// DomainLimits is one domain's limits, in the config's order.
type DomainLimits struct {
	Name   string        `json:"name"`
	Limits []LimitCounts `json:"limits"`
}

// LimitCounts is one limit, as the config states it, and its decisions.
type LimitCounts struct {
	Label     string  `json:"label"`
	Name      string  `json:"name"`
	Path      string  `json:"path"`
	Algorithm string  `json:"algorithm"`
	Rate      string  `json:"rate"`
	Allowed   []int64 `json:"allowed"`
	Refused   []int64 `json:"refused"`
}

// limits answers GET /ui/limits[?seconds=N] (N at most RingSeconds, the
// default).
func (h *handler) limits(w http.ResponseWriter, r *http.Request) {
	n := RingSeconds
	if s := r.URL.Query().Get("seconds"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > RingSeconds {
			writeError(w, http.StatusBadRequest, "seconds: want a whole number from 1 to "+strconv.Itoa(RingSeconds))
			return
		}
		n = v
	}
	end := h.o.Now().Unix() - 1 // the last full second
	out := Limits{StepSeconds: 1, End: end, Domains: []DomainLimits{}}
	listed := 0
	if cfg := h.o.Config(); cfg != nil {
		for _, d := range cfg.Domains() {
			dl := DomainLimits{Name: d.Name, Limits: []LimitCounts{}}
			for _, rule := range d.Rules() {
				if listed++; listed > MaxLimits {
					out.Truncated = true
					break
				}
				l := LimitCounts{Label: rule.Label(), Name: rule.Name, Path: rule.Path, Algorithm: rule.Limit.Algorithm.String(), Rate: rateOf(rule)}
				if h.o.Activity != nil {
					l.Allowed, l.Refused = h.o.Activity.Counts(d.Name, l.Label, end, n)
				} else {
					l.Allowed, l.Refused = []int64{}, []int64{}
				}
				dl.Limits = append(dl.Limits, l)
			}
			out.Domains = append(out.Domains, dl)
			if out.Truncated {
				break
			}
		}
	}
	writeJSON(w, out)
}

// rateOf is a limit's rate as the config states it: a leaky bucket's
// reported rate ("10/minute"), a window's limit per window.
func rateOf(rule *descriptors.Rule) string {
	d := rule.Describe()
	switch {
	case d.Calendar != "" && d.Limit != nil:
		return strconv.FormatInt(*d.Limit, 10) + " per " + d.Calendar + " (" + d.TimeZone + ")"
	case d.Window != "" && d.Limit != nil:
		return strconv.FormatInt(*d.Limit, 10) + " per " + d.Window
	}
	return d.Reported
}

// Refused is GET /ui/refused.
type Refused struct {
	WindowSeconds int             `json:"window_seconds"`
	Buckets       []RefusedBucket `json:"buckets"`
}

// RefusedBucket is one bucket of the summary.
type RefusedBucket struct {
	Domain     string  `json:"domain"`
	Key        string  `json:"key"`
	Descriptor []Entry `json:"descriptor"`
	Limit      string  `json:"limit"`
	Refused    int64   `json:"refused"`
	// Error is how many of Refused may be another bucket's (0: exact).
	Error        int64   `json:"error"`
	Remaining    int64   `json:"remaining"`
	ResetSeconds float64 `json:"reset_seconds"`
}

// Entry is a descriptor entry.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (h *handler) refused(w http.ResponseWriter, r *http.Request) {
	now := h.o.Now()
	out := Refused{WindowSeconds: WindowSeconds, Buckets: []RefusedBucket{}}
	if h.o.Activity != nil {
		for _, t := range h.o.Activity.Hitters().Top(now, MaxRefused) {
			b := RefusedBucket{Domain: t.Domain, Key: t.Key, Descriptor: []Entry{}, Limit: t.Label, Refused: t.Refused, Error: t.Error,
				Remaining: t.Remaining, ResetSeconds: max(t.ResetAt.Sub(now).Seconds(), 0)}
			if _, es, _, ok := bucketkey.Parse(t.Key); ok {
				for _, e := range es {
					b.Descriptor = append(b.Descriptor, Entry{Key: e.Key, Value: e.Value})
				}
			}
			out.Buckets = append(out.Buckets, b)
		}
	}
	writeJSON(w, out)
}

// Quotas is GET /ui/rlqs.
type Quotas struct {
	Streams []Stream `json:"streams"`
	Levels  []Level  `json:"levels"`
}

// Stream is an RLQS stream: its Envoy's address, domain, buckets and last
// report (RFC 3339, "" before one).
type Stream struct {
	Peer       string `json:"peer"`
	Domain     string `json:"domain"`
	Buckets    int    `json:"buckets"`
	LastReport string `json:"last_report"`
}

// Level is a level the streams share: its subscribers (on every replica),
// their demand and the fill level, in requests per second (fill 0 when
// every demand fits), and the largest shares here.
type Level struct {
	Level       string  `json:"level"`
	Subscribers int     `json:"subscribers"`
	Demand      float64 `json:"demand"`
	Fill        float64 `json:"fill"`
	// FillLimits says whether Fill caps anyone: false when every demand
	// fits.
	FillLimits bool    `json:"fill_limits"`
	Top        []Share `json:"top"`
}

// Share is a subscriber's share of a level, in requests per second.
type Share struct {
	Instance string  `json:"instance"`
	Share    float64 `json:"share"`
}

func (h *handler) rlqs(w http.ResponseWriter, r *http.Request) {
	out := Quotas{Streams: []Stream{}, Levels: []Level{}}
	if h.o.RLQS != nil {
		for _, s := range h.o.RLQS.StreamViews() {
			v := Stream{Peer: s.Peer, Domain: s.Domain, Buckets: s.Buckets}
			if !s.LastReport.IsZero() {
				v.LastReport = s.LastReport.UTC().Format(time.RFC3339)
			}
			out.Streams = append(out.Streams, v)
		}
		for _, l := range h.o.RLQS.LevelViews(shares) {
			v := Level{Level: l.Key, Subscribers: l.Subscribers, Demand: l.Demand, Top: []Share{}}
			if l.Fill != nil {
				v.Fill, v.FillLimits = *l.Fill, true
			}
			for _, s := range l.Largest {
				v.Top = append(v.Top, Share{Instance: s.Instance, Share: s.Share})
			}
			out.Levels = append(out.Levels, v)
		}
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A write fails only when the client went away: nothing to tell it.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
