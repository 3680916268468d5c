package store

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A try that fails transiently after etcd's request timeout (a cluster without
// quorum) is not tried again past transientBudget; quick failures (an
// election) are, up to transientRetries times.
func TestRetryTransientStopsAtItsBudget(t *testing.T) {
	defer func(f func() time.Time) { transientNow = f }(transientNow)
	now := time.Unix(0, 0)
	transientNow = func() time.Time { return now }
	unavailable := status.Error(codes.Unavailable, "etcdserver: request timed out")
	for _, c := range []struct {
		each  time.Duration
		tries int
	}{{7 * time.Second, 1}, {2 * time.Second, 3}, {10 * time.Millisecond, transientRetries + 1}} {
		tries := 0
		_, err := retryTransient(context.Background(), func(bool) (int, error) {
			tries++
			now = now.Add(c.each)
			return 0, unavailable
		})
		if !Transient(err) || tries != c.tries {
			t.Errorf("tries taking %s each: %d tries (%v), want %d", c.each, tries, err, c.tries)
		}
	}
}
