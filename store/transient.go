package store

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Transient reports an etcd error that a retry may cure: the cluster is electing
// a leader, or the member a request went to died. A write that failed this way
// may or may not have been applied.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable // status.Code unwraps
}

// transientRetries is how often a write that failed transiently is tried again,
// and transientBackoff how long before the first retry (doubling): together about
// the 1–2 s an etcd leader election takes.
const (
	transientRetries = 3
	transientBackoff = 300 * time.Millisecond
)

// transientBudget bounds the retries in time: an election is over within it,
// while a cluster without quorum answers each try only after etcd's request
// timeout (about 7 s), and the caller is better told at once (the gateway's
// 503 with Retry-After) than after four of them.
const transientBudget = 5 * time.Second

// transientNow is the clock of transientBudget (tests swap it).
var transientNow = time.Now

// retryTransient runs try until it succeeds, fails otherwise, or has failed
// transiently transientRetries+1 times or for transientBudget. try learns
// whether an earlier attempt failed transiently, since that attempt may have
// been applied.
func retryTransient[T any](ctx context.Context, try func(retry bool) (T, error)) (T, error) {
	wait := transientBackoff
	start := transientNow()
	for attempt := 0; ; attempt++ {
		v, err := try(attempt > 0)
		if !Transient(err) || attempt == transientRetries || transientNow().Sub(start) >= transientBudget {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}
