package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A request's context behaves as context.WithDeadline's: contexts derived from
// it end when the request does, or at the deadline, with the same errors;
// before anything waits on it, it holds no timer.
func TestRequestContext(t *testing.T) {
	c := &requestContext{deadline: time.Now().Add(time.Hour)}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if c.Err() != nil || c.inner.Load() != nil {
		t.Fatal("a fresh context has ended, or made its timer")
	}
	derived, cancel := context.WithTimeout(c, time.Minute)
	defer cancel()
	c.end()
	select {
	case <-derived.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a derived context did not end with the request")
	}
	if !errors.Is(derived.Err(), context.Canceled) || !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("errors %v, %v; want canceled", derived.Err(), c.Err())
	}

	// Ended before anything waited on it.
	c = &requestContext{deadline: time.Now().Add(time.Hour)}
	c.end()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("error %v; want canceled", c.Err())
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("an ended context's Done is open")
	}

	// The deadline.
	c = &requestContext{deadline: time.Now().Add(20 * time.Millisecond)}
	defer c.end()
	derived, cancel = context.WithCancel(c)
	defer cancel()
	select {
	case <-derived.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline did not end a derived context")
	}
	if !errors.Is(derived.Err(), context.DeadlineExceeded) || !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("errors %v, %v; want the deadline", derived.Err(), c.Err())
	}
	// Past its deadline, unwaited on.
	c = &requestContext{deadline: time.Now().Add(-time.Second)}
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("error %v; want the deadline", c.Err())
	}
}
