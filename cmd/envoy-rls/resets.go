package main

import (
	"context"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// resetWatcher is a store that hears of the resets made through other
// replicas (the Redis store, and the fallback store in front of it).
type resetWatcher interface {
	WatchResets(ctx context.Context, forget func(keys []string))
}

// watchResets has the service drop, from its over-limit cache, the buckets
// any replica resets (DELETE /buckets), until ctx ends; the returned
// channel is closed then. A store that cannot tell has nothing to watch.
func watchResets(ctx context.Context, st store, svc *rls.Service) <-chan struct{} {
	done := make(chan struct{})
	w, ok := st.(resetWatcher)
	if !ok {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		w.WatchResets(ctx, svc.ForgetOverLimit)
	}()
	return done
}
