package store_test

import (
	"context"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// WaitJob's job carries the revision it was written at, as every read does: the
// gateway's cache keeps the newer of two copies by it, and a copy without one
// was dropped, so a GET right after a create with ?wait=true served the job as
// it was before it ended (seen in the end-to-end loudnorm test).
func TestWaitJobCarriesTheRevision(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Now())
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	got, read := make(chan *mj.Job, 1), make(chan struct{})
	go func() {
		first := true
		w, err := s.WaitJob(ctx, j.ID, func(j *mj.Job) bool {
			if first { // its first read: it watches from that read's revision on
				first = false
				close(read)
			}
			return j.Status.Terminal()
		})
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	<-read
	ended, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Succeed(time.Now(), ""); return nil })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-got:
		if w == nil || w.Status != mj.StatusSucceeded || w.Revision != ended.Revision {
			t.Fatalf("WaitJob = %+v; want succeeded at revision %d", w, ended.Revision)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitJob did not return")
	}
}
