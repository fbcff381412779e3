package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/ui"
)

// page is the operator's page of the admin address: what it counts from
// the start, and what it shows. A nil *page is the page turned off
// (-admin-page=false, or no admin address).
type page struct {
	s       *settings
	store   ui.Checker
	started time.Time

	activity *ui.Activity
	reloads  *ui.Reloads
	// regions are the regions' statuses (nil: no regions).
	regions func() []region.Status
}

// showRegions has the page show the regions statuses gives.
func (p *page) showRegions(statuses func() []region.Status) {
	if p != nil {
		p.regions = statuses
	}
}

// newPage returns the page -admin-page and -admin-addr ask for, or nil.
func newPage(s *settings, st ui.Checker) *page {
	if !s.adminPage || s.adminAddr == "" {
		return nil
	}
	return &page{s: s, store: st, started: time.Now(), activity: ui.NewActivity(nil, ui.DefaultCapacity), reloads: &ui.Reloads{}}
}

// observe returns o, and the page's counts beside it.
func (p *page) observe(o rls.Observer) rls.Observer {
	if p == nil {
		return o
	}
	return rls.Observers(o, p.activity)
}

// reloadLog is where the config's loads are told of (nil: nowhere).
func (p *page) reloadLog() *ui.Reloads {
	if p == nil {
		return nil
	}
	return p.reloads
}

// handler serves the page in front of admin, the admin endpoints, on addr,
// and keeps the clock of its counts until ctx ends.
func (p *page) handler(ctx context.Context, admin http.Handler, addr net.Addr, svc *rls.Service, quotas *rlqs.Service) (http.Handler, error) {
	if p == nil {
		return admin, nil
	}
	go p.activity.Run(ctx)
	o := ui.Options{
		Version: version(), Mode: "exact", StoreName: p.s.store.String(), Store: p.store,
		ConfigSource: "files: " + p.s.config, Config: svc.Config, Reloads: p.reloads, Started: p.started,
		Activity: p.activity, Admin: admin, Origins: ui.Origins{Addr: addr.String()},
	}
	if p.s.store.value != memoryStore && p.s.store.value != memcachedStore && p.s.syncInterval > 0 {
		o.Mode, o.SyncInterval = "local-first", p.s.syncInterval
	}
	if p.s.xds.address != "" {
		o.ConfigSource = "xds: " + p.s.xds.address
	}
	if quotas != nil {
		o.RLQS = quotas
	}
	o.Regions = p.regions
	return ui.Handler(o)
}

// errorIfNone is an error when no config loaded at the start.
func errorIfNone(cfg *descriptors.Config) error {
	if cfg == nil {
		return errors.New("no config loaded at the start (-force-start-without-config): see the log")
	}
	return nil
}
