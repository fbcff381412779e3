package ui

import (
	"context"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// Checker is a store's health check (rls.Checker): nil while it answers.
type Checker interface {
	Check(ctx context.Context) error
}

// Reloads remembers the last config load: when, and its error if it
// failed (the config in force then stays). The zero value is ready; a nil
// *Reloads records nothing. It is safe for concurrent use.
type Reloads struct {
	mu  sync.Mutex
	at  time.Time
	err string
}

// Loaded records a load that ended now, with err if it failed.
func (r *Reloads) Loaded(err error) { r.LoadedAt(time.Now(), err) }

// LoadedAt records a load that ended at t, with err if it failed.
func (r *Reloads) LoadedAt(t time.Time, err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at, r.err = t, ""
	if err != nil {
		r.err = err.Error()
	}
}

// Last returns when the last load ended (zero: none yet) and its error
// ("" if it succeeded).
func (r *Reloads) Last() (time.Time, string) {
	if r == nil {
		return time.Time{}, ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.err
}

// How the page asks the store: at most once per storeCheckEvery, giving
// it storeCheckTimeout to answer.
const (
	storeCheckEvery   = time.Second
	storeCheckTimeout = 500 * time.Millisecond
)

// storeHealth caches a store's check: a page open in many tabs asks the
// store once a second at most.
type storeHealth struct {
	check Checker

	mu  sync.Mutex // held during a check: others wait for its answer
	at  time.Time
	err error
}

func (h *storeHealth) get(ctx context.Context, now time.Time) error {
	if h.check == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && now.Sub(h.at) < storeCheckEvery {
		return h.err
	}
	ctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
	defer cancel()
	h.at, h.err = now, h.check.Check(ctx)
	return h.err
}

// Status is GET /ui/status.
type Status struct {
	Version       string       `json:"version"`
	Mode          string       `json:"mode"`          // exact or local-first
	SyncInterval  string       `json:"sync_interval"` // local-first's, "" in exact
	Store         StoreStatus  `json:"store"`
	Config        ConfigStatus `json:"config"`
	Started       string       `json:"started"` // RFC 3339
	UptimeSeconds int64        `json:"uptime_seconds"`
	// Regions is every region a limit is divided among (-region), as this
	// replica sees it; absent without regions.
	Regions []region.Status `json:"regions,omitempty"`
}

// StoreStatus is the store and whether it answers its health check.
type StoreStatus struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// ConfigStatus is where the config comes from, its domains, and the last
// load (RFC 3339, "" for none yet) with its error.
type ConfigStatus struct {
	Source     string `json:"source"`
	Domains    int    `json:"domains"`
	LastReload string `json:"last_reload"`
	LastError  string `json:"last_error"`
}
