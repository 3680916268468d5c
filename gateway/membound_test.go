package gateway

import (
	"fmt"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// The job cache is bounded in bytes as well as in entries: large jobs evict others
// rather than grow it, and a job larger than the whole bound is not cached.
func TestJobCacheBoundedInBytes(t *testing.T) {
	var c jobCache
	c.live.Store(true)
	c.maxBytes = 1 << 20
	big := strings.Repeat("x", 100<<10) // a 100 KiB command
	for i := range 100 {
		c.put(&mj.Job{ID: fmt.Sprint("job", i), Revision: 1, FFmpegCommands: []string{big}}, false)
		if c.bytes > c.maxBytes {
			t.Fatalf("after %d jobs of 100 KiB the cache holds %d bytes, over its bound %d", i+1, c.bytes, c.maxBytes)
		}
	}
	var sum int64
	for id, j := range c.jobs {
		if c.sizes[id] != jobBytes(j) {
			t.Fatalf("job %s counted as %d bytes, is %d", id, c.sizes[id], jobBytes(j))
		}
		sum += c.sizes[id]
	}
	if n := len(c.jobs); n == 0 || n > 10 || sum != c.bytes || len(c.sizes) != n {
		t.Fatalf("%d jobs cached, %d sizes, %d bytes counted, %d summed", n, len(c.sizes), c.bytes, sum)
	}
	last := "job99"
	if c.get(last) == nil {
		t.Fatal("the job just put was evicted")
	}
	// A newer copy replaces the old one's size; one too large for the cache leaves
	// nothing stale behind.
	c.put(&mj.Job{ID: last, Revision: 2}, false)
	if c.sizes[last] != jobBytes(c.jobs[last]) {
		t.Fatal("an updated job kept its old size")
	}
	c.put(&mj.Job{ID: last, Revision: 3, FFmpegCommands: []string{strings.Repeat("y", 2<<20)}}, false)
	if c.get(last) != nil {
		t.Fatal("a job over the whole bound is cached, or its older copy stayed")
	}
	c.drop("job98")
	sum = 0
	for _, n := range c.sizes {
		sum += n
	}
	if sum != c.bytes || len(c.sizes) != len(c.jobs) {
		t.Fatalf("after drops: %d bytes counted, %d summed", c.bytes, sum)
	}
}

// An account stream holds ids and hashes, bounded: a flood of changes turns into
// a resync rather than a growing set, and the views sent are remembered by hash.
func TestAccountStreamBounded(t *testing.T) {
	s := newSubscriber()
	s.changed = map[string]bool{}
	for i := range 3 * maxTracked {
		s.signal(fmt.Sprint("job", i))
		if len(s.changed) > maxTracked {
			t.Fatalf("%d changes pending, over %d", len(s.changed), maxTracked)
		}
	}
	if !s.takeResync() {
		t.Fatal("too many changes pending, and no resync")
	}
	if ids := s.take(); len(ids) > maxTracked {
		t.Fatalf("%d ids taken", len(ids))
	}
	s.signal("after")
	if ids := s.take(); len(ids) != 1 || ids[0] != "after" {
		t.Fatalf("after the resync: %v", ids)
	}

	sent := sentViews{}
	view := []byte(`{"id":"a","status":"queued"}`)
	if !sent.fresh("a", view) || sent.fresh("a", view) {
		t.Fatal("a repeated view is sent again, or a new one is not")
	}
	if !sent.fresh("a", []byte(`{"id":"a","status":"running"}`)) {
		t.Fatal("a changed view is not sent")
	}
	for i := range 3 * maxTracked {
		sent.fresh(fmt.Sprint("job", i), view)
		if len(sent) > maxTracked {
			t.Fatalf("%d views remembered, over %d", len(sent), maxTracked)
		}
	}
}
