package dispatcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// A step with "publish": false (docs/pipelines.md#intermediate-outputs): its
// outputs stay while a step may read them, and are deleted when the pipeline
// ends, their storage count given back; the published step's stay.
func TestPipelineEndDeletesIntermediateOutputs(t *testing.T) {
	files, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := newPipelineRig(t, func(p *pipelines) { p.blobs = files })
	p := testPipeline([]string{"a", "b"}, map[string]string{"b": "a"})
	p.Steps[0].Intermediate, p.Plan[0].Pipeline.Intermediate = true, true
	p = r.create(p, true)
	a, b := p.Steps[0].Jobs[0], p.Steps[1].Jobs[0]
	put := func(id string) string {
		key := mj.RunScope(id, 1) + "alloc/outputs/out.mp4"
		if _, err := files.Put(r.ctx, key, strings.NewReader("abc"), 3); err != nil {
			t.Fatal(err)
		}
		return key
	}
	exists := func(key string) bool {
		_, err := files.ReadAll(r.ctx, key)
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	held := func() int64 {
		_, u, _, _ := r.s.AccountLimits(r.ctx, "acct", store.Limits{})
		return u.StorageBytes
	}
	keyA, keyB := put(a), put(b)
	retention := time.Now().Add(7 * 24 * time.Hour)

	r.end(a, func(j *mj.Job) { succeed(j); j.TotalOutputBytes = 3 })
	if _, err := r.s.CountOutputs(r.ctx, r.job(a), store.Held{Bytes: 3, Expires: retention}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "b released", func() bool { return len(r.job(b).Awaits) == 0 })
	r.svc.pass(r.ctx, true)
	if !exists(keyA) {
		t.Fatal("a's output was deleted while b had not ended")
	}
	r.end(b, func(j *mj.Job) { succeed(j); j.TotalOutputBytes = 3 })
	testenv.Eventually(t, time.Minute, "the pipeline to end", func() bool { return r.pipeline(p.ID).Status.Terminal() })
	if st := r.pipeline(p.ID).Status; st != mj.StatusSucceeded {
		t.Fatalf("pipeline %s", st)
	}
	if exists(keyA) || !exists(keyB) {
		t.Fatalf("after the end: a's output exists %v (want deleted), b's %v (want kept)", exists(keyA), exists(keyB))
	}
	// a's count ends at the janitor's next release.
	if n, err := r.s.ReleaseExpired(r.ctx, time.Now().Add(time.Second), func(string) error { return nil }); err != nil || n != 1 || held() != 0 {
		t.Fatalf("release: %d %v, held %d; want a's 3 bytes given back", n, err, held())
	}
}
