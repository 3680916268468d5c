package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/metrics"
	"gocloud.dev/gcerrors"
)

// BlobTimeout is Dispatcher.BlobTimeout's default: how long one blob store call
// (a result.json read, a listing, a manifest upload) may take. A stalled S3
// request must not hold an event worker: its queue would fill and stop the event
// stream (docs/operations.md, "Deadlines").
const BlobTimeout = 30 * time.Second

// sweepCalls is how many BlobTimeouts a janitor sweep, a listing and many deletes
// in one call, may take; what it did not reach waits for the next sweep.
const sweepCalls = 20

// storage is Blobs with a deadline on every call (the settler's results'):
// every blob store call the dispatcher makes goes through it.
func (d *Dispatcher) storage() Blobs { return d.settle.res.blobs }

// timedBlobs gives every call of b a deadline. A call that does not return by
// then (a store that ignores its context, a hung local disk) is left behind: the
// caller gets the deadline's error and goes on.
type timedBlobs struct {
	b       Blobs
	timeout time.Duration
	// answered is when the store last answered a call (unix nanoseconds): an
	// error of one object is told from an outage by it (resultUnreadable).
	answered *atomic.Int64
}

func (t timedBlobs) ReadAll(ctx context.Context, key string) ([]byte, error) {
	return bounded(ctx, t.timeout, t.answered, "read", func(ctx context.Context) ([]byte, error) { return t.b.ReadAll(ctx, key) })
}

func (t timedBlobs) Put(ctx context.Context, key string, r io.Reader, max int64) (int64, error) {
	return bounded(ctx, t.timeout, t.answered, "put", func(ctx context.Context) (int64, error) { return t.b.Put(ctx, key, r, max) })
}

func (t timedBlobs) List(ctx context.Context, prefix string) ([]string, error) {
	return bounded(ctx, t.timeout, t.answered, "list", func(ctx context.Context) ([]string, error) { return t.b.List(ctx, prefix) })
}

func (t timedBlobs) Sweep(ctx context.Context, prefix string, cutoff time.Time) (int, error) {
	return bounded(ctx, sweepCalls*t.timeout, t.answered, "sweep", func(ctx context.Context) (int, error) { return t.b.Sweep(ctx, prefix, cutoff) })
}

func (t timedBlobs) Each(ctx context.Context, prefix string, fn func(key string, size int64, mod time.Time) error) error {
	_, err := bounded(ctx, sweepCalls*t.timeout, t.answered, "list", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.b.Each(ctx, prefix, fn) })
	return err
}

func (t timedBlobs) Delete(ctx context.Context, key string) error {
	_, err := bounded(ctx, t.timeout, t.answered, "delete", func(ctx context.Context) (struct{}, error) { return struct{}{}, t.b.Delete(ctx, key) })
	return err
}

// bounded runs call with a deadline of timeout, returning by then whether or not
// call did. Its errors, but "not found", count in mediajobs_dispatcher_blob_errors_total;
// an answer (a value or "not found") is noted in answered.
func bounded[T any](ctx context.Context, timeout time.Duration, answered *atomic.Int64, op string, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		defer func() {
			if v := recover(); v != nil {
				a.err = fmt.Errorf("blob store %s: internal error: %v", op, v)
			}
			done <- a
		}()
		a.v, a.err = call(ctx)
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		a.err = fmt.Errorf("blob store %s: no answer within %s: %w", op, timeout, ctx.Err())
	}
	if a.err != nil && !errors.Is(a.err, blob.ErrNotFound) {
		metrics.BlobErrors.WithLabelValues(op).Inc()
	} else if answered != nil {
		answered.Store(time.Now().UnixNano())
	}
	return a.v, a.err
}

// transientBlobError tells a store error that is about the store, not the object:
// no answer in time, an overloaded or failing server.
func transientBlobError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch gcerrors.Code(err) {
	case gcerrors.DeadlineExceeded, gcerrors.Canceled, gcerrors.ResourceExhausted, gcerrors.Internal:
		return true
	}
	return false
}
