package rlqs

import (
	"context"
	"time"
)

// workers serve reports, at most max at once (Options.MaxAnswering), on
// goroutines of their own rather than on their streams': a report's
// store and registry calls grow the stack of the goroutine that makes
// them, and a goroutine keeps its stack until collections shrink it, so
// on a stream's own goroutine each of thousands of idle Envoys would hold
// what only the few reports being served need. A worker idle for
// workerIdle ends.
type workers struct {
	jobs  chan func()   // to an idle worker
	slots chan struct{} // a place for each worker running
}

// workerIdle is how long a worker waits for a report before it ends.
const workerIdle = 10 * time.Second

func newWorkers(max int) *workers {
	return &workers{jobs: make(chan func()), slots: make(chan struct{}, max)}
}

// run runs f on a worker and returns once it has run; it returns false
// without running it if ctx ends or stop is closed before a worker is
// free.
func (w *workers) run(ctx context.Context, stop <-chan struct{}, f func()) bool {
	done := make(chan struct{})
	job := func() {
		defer close(done)
		f()
	}
	select {
	case w.jobs <- job:
	default:
		select {
		case w.jobs <- job:
		case w.slots <- struct{}{}:
			go w.work(job)
		case <-ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
	<-done
	return true
}

// work runs job, then the jobs it is handed, until it has been idle for
// workerIdle.
func (w *workers) work(job func()) {
	defer func() { <-w.slots }()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-w.jobs:
		case <-idle.C:
			return
		}
	}
}
