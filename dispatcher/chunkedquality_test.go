package dispatcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// With "quality" the plan keeps the source it fetched: the reference, the
// audio and the stitch read that copy, never the user's URL (fetched once,
// by the plan, under max_input_bytes). The plan's outputs (the copy of the
// source, the split chunks) and the reference's are intermediate: kept while
// a step may read them, deleted when the pipeline ends, their storage count
// given back; the stitch's file stays.
func TestChunkedQualityReadsThePlansSourceAndPurgesIt(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	files, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := newPipelineRig(t, func(p *pipelines) { p.read, p.blobs = b.read, files })
	now := time.Now().UTC()
	const url = "https://media.example/a.mp4"
	parent := &mj.Job{ID: uuid.NewString(), AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
		InputFiles: map[string]string{"video": url}, OutputNames: []string{"out.mp4"},
		FFmpegCommands: []string{"-i {{video}} -c:v libx264 -c:a aac {{out.mp4}}"}, TimeoutSeconds: 60,
		CreatedAt: now, QueuedAt: now, UpdatedAt: now,
		Parallel: &mj.Parallel{Mode: mj.ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64, Quality: true}}
	p := mj.NewChunkedPipeline(parent, now)
	if _, err := r.s.CreateChunkedJob(r.ctx, parent, p, nil, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.MaterialisePipeline(r.ctx, p.ID, now); err != nil {
		t.Fatal(err)
	}
	planID := p.Steps[0].Jobs[0]

	put := func(id, name string, size int) mj.Output {
		key := mj.RunScope(id, 1) + "alloc/outputs/" + name
		if _, err := files.Put(r.ctx, key, strings.NewReader(strings.Repeat("x", size)), int64(size)); err != nil {
			t.Fatal(err)
		}
		return mj.Output{Name: name, Key: key, Size: int64(size)}
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
	retention := now.Add(7 * 24 * time.Hour)
	// end succeeds job id with outs, counted against the account's storage
	// as the settler counts them.
	end := func(id string, outs ...mj.Output) {
		t.Helper()
		var total int64
		for _, o := range outs {
			total += o.Size
		}
		r.end(id, func(j *mj.Job) {
			at := time.Now()
			j.StartedAt, j.Outputs, j.TotalOutputBytes = &at, outs, total
			j.Succeed(at, "")
		})
		if _, err := r.s.CountOutputs(r.ctx, r.job(id), store.Held{Bytes: total, Expires: retention}); err != nil {
			t.Fatal(err)
		}
	}

	// The plan: two chunks, its lists, and the source it fetched.
	list := `{"aux":true,"chunks":[{"index":0,"start":0,"end":2,"frames":50},{"index":1,"start":2,"end":4,"frames":50,"last":true}]}`
	lists := []mj.Output{put(planID, mj.ChunkListFile, len(list)), put(planID, mj.ChunkPlanFile, 2)}
	b.put(lists[0].Key, []byte(list))
	planOuts := append(lists, put(planID, mj.ChunkFileName(0), 100), put(planID, mj.ChunkFileName(1), 100), put(planID, mj.ChunkSourceFile, 200))
	source := planOuts[len(planOuts)-1].Key
	end(planID, planOuts...)
	testenv.Eventually(t, time.Minute, "the pipeline extended and its jobs stored", func() bool {
		pl := r.pipeline(p.ID)
		return len(pl.Steps) == 5 && len(pl.Plan) == 0
	})
	pl := r.pipeline(p.ID)
	step := func(name string) []string {
		for _, s := range pl.Steps {
			if s.Name == name {
				return s.Jobs
			}
		}
		t.Fatalf("no step %s in %+v", name, pl.Steps)
		return nil
	}
	enc, audio, ref, stitch := step(mj.ChunkStepEncode), step(mj.ChunkStepAudio)[0], step(mj.ChunkStepReference)[0], step(mj.ChunkStepStitch)[0]
	for _, id := range append([]string{audio, ref, stitch}, enc...) {
		j := r.job(id)
		for name, v := range j.InputFiles {
			if v == url {
				t.Fatalf("step %s's input %q is the user's URL again", j.Pipeline.Step, name)
			}
		}
	}
	want := "job:" + planID + "/" + mj.ChunkSourceFile
	if r.job(ref).InputFiles["video"] != want || r.job(ref).InputKeys["video"] != source || r.job(audio).InputKeys["video"] != source ||
		r.job(stitch).InputFiles[mj.ChunkSourceInput] != want || r.job(stitch).InputKeys[mj.ChunkSourceInput] != source {
		t.Fatalf("reference %v %v, stitch %v %v", r.job(ref).InputFiles, r.job(ref).InputKeys, r.job(stitch).InputFiles, r.job(stitch).InputKeys)
	}

	for i, id := range enc {
		end(id, put(id, mj.ChunkFileName(i), 100), put(id, mj.ChunkHashesFileName(i), 10))
	}
	end(audio, put(audio, mj.AuxFileName("out.mp4"), 10))
	end(ref, put(ref, mj.ChunkReferenceFile, 150))
	testenv.Eventually(t, time.Minute, "the stitch released", func() bool { return len(r.job(stitch).Awaits) == 0 })
	if !exists(source) {
		t.Fatal("the plan's copy of the source was deleted before the stitch read it")
	}
	verif := put(stitch, mj.ChunkVerification, 2)
	b.put(verif.Key, []byte(`{"pass":true}`))
	out := put(stitch, "out.mp4", 120)
	end(stitch, out, verif)
	testenv.Eventually(t, time.Minute, "the parent succeeded", func() bool { return r.job(parent.ID).Status == mj.StatusSucceeded })
	testenv.Eventually(t, time.Minute, "the pipeline ended", func() bool { return r.pipeline(p.ID).Status.Terminal() })
	for _, o := range planOuts {
		if exists(o.Key) {
			t.Fatalf("the plan's %s is still stored after the pipeline ended", o.Name)
		}
	}
	if exists(r.job(ref).Outputs[0].Key) || !exists(out.Key) {
		t.Fatalf("after the end: reference stored %v (want deleted), the stitched file %v (want kept)", exists(r.job(ref).Outputs[0].Key), exists(out.Key))
	}
	// The plan's and the reference's counts end at the janitor's release;
	// the rest (chunks, audio, the stitch's files) count until their
	// retention.
	before := held()
	if n, err := r.s.ReleaseExpired(r.ctx, time.Now().Add(time.Second), func(string) error { return nil }); err != nil || n != 2 || before-held() != int64(len(list))+2+400+150 {
		t.Fatalf("release: %d %v, held %d -> %d; want the plan's and the reference's bytes given back", n, err, before, held())
	}
}
