package rls

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/health"
)

// Checker is a store that can tell whether it answers.
type Checker interface {
	Check(ctx context.Context) error
}

// How often WatchStore asks the store: often while it does not answer, so
// that serving resumes soon after it is back.
const (
	checkWhileServing = time.Second
	checkWhileDown    = 250 * time.Millisecond
)

// WatchStore keeps the health status hs in step with the store until ctx
// ends: SERVING while the store answers, NOT_SERVING while it does not (a
// Redis that is down or not up yet), so that load balancers send calls
// elsewhere; unless serveWhileDown, for a service whose failure mode still
// answers. It logs every change.
//
// It returns once the first check has set the status, so that a server
// announced as started already reports whether it serves; the checks go on
// in the background, and the returned channel is closed when they end.
func WatchStore(ctx context.Context, store Checker, hs *health.Server, log *slog.Logger, serveWhileDown bool) <-chan struct{} {
	checked, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		watchStore(ctx, store, hs, log, serveWhileDown, checked)
	}()
	select {
	case <-checked:
	case <-done:
	}
	return done
}

func watchStore(ctx context.Context, store Checker, hs *health.Server, log *slog.Logger, serveWhileDown bool, checked chan struct{}) {
	answering, known := false, false
	for {
		checkCtx, cancel := context.WithTimeout(ctx, checkWhileServing)
		err := store.Check(checkCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if ok := err == nil; ok != answering || !known {
			answering, known = ok, true
			SetServing(hs, ok || serveWhileDown)
			switch {
			case ok:
				log.Info("ready: serving")
			case serveWhileDown:
				log.Error("not ready: the failure mode answers", "err", err)
			default:
				log.Error("not ready: not serving", "err", err)
			}
		}
		if checked != nil {
			close(checked)
			checked = nil
		}
		wait := checkWhileServing
		if !answering {
			wait = checkWhileDown
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
