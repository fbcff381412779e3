package rls

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Observer receives what the service's metrics count. Its methods are
// called on the request path: they must be quick and safe for concurrent
// use. A nil Observer in Options observes nothing.
type Observer interface {
	// Call is one call, its outcome and how long it took: "OK",
	// "OVER_LIMIT", or the gRPC code of an error, such as "InvalidArgument"
	// or "Unavailable". domain is the request's domain if the config has
	// it, else "".
	Call(domain, outcome string, took time.Duration)
	// Limit is one level of a decided descriptor: its rule, its bucket
	// key, the hits the descriptor asked for and the bucket's result.
	// shadow says the level could not reject.
	Limit(domain string, rule *descriptors.Rule, key string, hits int64, r *limit.Result, shadow bool)
	// Store is one call of the store: which store (its name: "memory",
	// "redis", "fallback"), what for (StoreApply, StorePeek), how long it
	// took, and its error.
	Store(store, op string, took time.Duration, err error)
	// CacheHit is a call rejected from the local over-limit cache, without
	// asking the store.
	CacheHit()
	// FailureAnswer is a call answered by the failure mode (FailAllow or
	// FailDeny) because the store failed.
	FailureAnswer(mode FailureMode)
}

// The operations of store calls, as Observer.Store and traces name them.
const (
	// StoreApply decides and charges a request's buckets.
	StoreApply = "apply"
	// StorePeek reads, without charging, the figures of the descriptors of
	// a request the over-limit cache rejected.
	StorePeek = "peek"
)

// storeName is the name a store gives itself with a Name method (memory,
// redis, fallback), or "store".
func storeName(st Store) string {
	if n, ok := st.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "store"
}

type noObserver struct{}

func (noObserver) Call(string, string, time.Duration)                                  {}
func (noObserver) Limit(string, *descriptors.Rule, string, int64, *limit.Result, bool) {}
func (noObserver) Store(string, string, time.Duration, error)                          {}
func (noObserver) CacheHit()                                                           {}
func (noObserver) FailureAnswer(FailureMode)                                           {}

// Observers returns an Observer that tells each of obs.
func Observers(obs ...Observer) Observer { return observers(obs) }

type observers []Observer

func (os observers) Call(domain, outcome string, took time.Duration) {
	for _, o := range os {
		o.Call(domain, outcome, took)
	}
}

func (os observers) Limit(domain string, rule *descriptors.Rule, key string, hits int64, r *limit.Result, shadow bool) {
	for _, o := range os {
		o.Limit(domain, rule, key, hits, r, shadow)
	}
}

func (os observers) Store(store, op string, took time.Duration, err error) {
	for _, o := range os {
		o.Store(store, op, took, err)
	}
}

func (os observers) CacheHit() {
	for _, o := range os {
		o.CacheHit()
	}
}

func (os observers) FailureAnswer(mode FailureMode) {
	for _, o := range os {
		o.FailureAnswer(mode)
	}
}
