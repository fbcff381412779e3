package rls

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// lateReader fails every call at once, and keeps reading its buckets for
// a while after, as a batched Redis call deciding a request its caller
// gave up on does.
type lateReader struct{ wg sync.WaitGroup }

func (s *lateReader) Apply(_ context.Context, _ time.Time, buckets []limit.Bucket, _ []limit.Result) error {
	s.wg.Go(func() {
		n := 0
		for range 200 {
			for _, b := range buckets {
				n += len(b.Key) + int(b.Hits)
			}
			time.Sleep(50 * time.Microsecond)
		}
		_ = n
	})
	return errors.New("the store did not answer in time")
}

// TestFailedCallsBucketsAreNotReused: the buckets of a store call that
// failed are not reused by the next request while the call may still
// read them (under -race, a reuse is a data race).
func TestFailedCallsBucketsAreNotReused(t *testing.T) {
	st := &lateReader{}
	svc, _ := newService(t, Options{Store: st, FailureMode: FailAllow})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				req := request("api", desc("user", string(rune('a'+g)), "action", "trade"), desc("hot", string(rune('a'+i%26))))
				if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st.wg.Wait()
}
