package rlqs

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkersBound: jobs run on at most max workers at once, each once;
// a job waiting for a worker gives up when its context ends or the
// service stops.
func TestWorkersBound(t *testing.T) {
	w := newWorkers(3)
	var running, most, ran atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ok := w.run(context.Background(), nil, func() {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				running.Add(-1)
				ran.Add(1)
			})
			if !ok {
				t.Error("a job did not run")
			}
		})
	}
	wg.Wait()
	if ran.Load() != 20 || most.Load() != 3 {
		t.Fatalf("%d jobs ran, at most %d at once; want 20, 3", ran.Load(), most.Load())
	}

	// All three busy: a job waiting gives up with its context, or the stop.
	release := make(chan struct{})
	for range 3 {
		go w.run(context.Background(), nil, func() { <-release })
	}
	for len(w.slots) < 3 || running.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the three have taken the workers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if w.run(ctx, nil, func() { t.Error("ran past its context") }) {
		t.Error("a job ran with every worker busy and its context ended")
	}
	stop := make(chan struct{})
	close(stop)
	if w.run(context.Background(), stop, func() { t.Error("ran past the stop") }) {
		t.Error("a job ran with every worker busy and the service stopped")
	}
	close(release)
}
