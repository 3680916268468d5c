package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/chunked"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// A chunked job that asked for quality, every phase run as the runner runs a
// job, in its sandbox (the probes and the measurement read-only, as the
// verification's decodes): the reference phase encodes the whole source,
// and the stitch, given it and the source, publishes the file with a report
// whose quality compares both encodes against the source. A stitch given a
// reference that does not decode still publishes its verified file: the
// report's quality says what went wrong.
func TestChunkedQualityPhases(t *testing.T) {
	testenv.Binary(t, "bwrap")
	inputs := map[string][]byte{"src.mp4": chunkSource(t)}
	srv, up := newServer(t, inputs)
	user := "-i {{video}} -c:v libx264 -preset veryfast -crf 28 -an {{out.mp4}}"
	task := func(phase string) *mj.ChunkTask {
		return &mj.ChunkTask{Phase: phase, Input: "video", Output: "out.mp4"}
	}
	in := func(name string) string { return srv.URL + "/in/" + name }
	take := func(prefix string, names ...string) { takeUploads(t, up, inputs, prefix, names...) }
	runIn := func(m mj.Manifest) *mj.Result {
		return runSandboxed(t, srv, m)
	}

	// With quality the plan also keeps the source it fetched (the source,
	// byte for byte), which the reference and the stitch read, not the
	// user's URL again.
	plan := task(mj.PhasePlan)
	plan.ChunkSeconds, plan.MaxChunks = 1, 64
	res := runIn(mj.Manifest{InputFiles: map[string]string{"video": in("src.mp4")}, OutputNames: []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkSplitPattern, mj.ChunkSourceFile},
		FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: plan})
	if !res.Succeeded {
		t.Fatalf("plan: %s", res.ErrorMessage)
	}
	var list mj.ChunkList
	if err := json.Unmarshal(up.files["outputs/"+mj.ChunkListFile], &list); err != nil || len(list.Chunks) < 2 || list.Aux {
		t.Fatalf("chunks.json %s: %v", up.files["outputs/"+mj.ChunkListFile], err)
	}
	take("plan/", mj.ChunkPlanFile, mj.ChunkSourceFile)
	if !bytes.Equal(inputs["plan/"+mj.ChunkSourceFile], inputs["src.mp4"]) {
		t.Fatalf("the plan's %s: %d bytes, not the source's %d", mj.ChunkSourceFile, len(inputs["plan/"+mj.ChunkSourceFile]), len(inputs["src.mp4"]))
	}
	for i, c := range list.Chunks {
		take("plan/", mj.ChunkFileName(i))
		enc := task(mj.PhaseEncode)
		enc.Chunk = c
		res := runIn(mj.Manifest{InputFiles: map[string]string{"chunk": in("plan/" + mj.ChunkFileName(i))}, OutputNames: []string{mj.ChunkFileName(i), mj.ChunkHashesFileName(i)},
			FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: enc})
		if !res.Succeeded {
			t.Fatalf("encode %d: %s", i, res.ErrorMessage)
		}
		take("enc/", mj.ChunkFileName(i), mj.ChunkHashesFileName(i))
	}
	res = runIn(mj.Manifest{InputFiles: map[string]string{"video": in("plan/" + mj.ChunkSourceFile)}, OutputNames: []string{mj.ChunkReferenceFile},
		FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: task(mj.PhaseReference)})
	if !res.Succeeded {
		t.Fatalf("reference: %s", res.ErrorMessage)
	}
	take("", mj.ChunkReferenceFile)

	stitch := func(reference string) (*mj.Result, *chunked.Report) {
		s := task(mj.PhaseStitch)
		s.Chunks = len(list.Chunks)
		files := map[string]string{"plan": in("plan/" + mj.ChunkPlanFile), mj.ChunkSourceInput: in("plan/" + mj.ChunkSourceFile), mj.ChunkReferenceInput: in(reference)}
		for i := range list.Chunks {
			files[mj.ChunkInputName(i)] = in("enc/" + mj.ChunkFileName(i))
			files[mj.ChunkHashesInputName(i)] = in("enc/" + mj.ChunkHashesFileName(i))
		}
		for k := range up.files {
			delete(up.files, k)
		}
		res := runIn(mj.Manifest{InputFiles: files, OutputNames: []string{"out.mp4", mj.ChunkVerification},
			FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: s})
		var rep chunked.Report
		if res.Succeeded {
			if err := json.Unmarshal(up.files["outputs/"+mj.ChunkVerification], &rep); err != nil {
				t.Fatalf("verification %s: %v", up.files["outputs/"+mj.ChunkVerification], err)
			}
		}
		return res, &rep
	}
	res, rep := stitch(mj.ChunkReferenceFile)
	if !res.Succeeded || !rep.Pass || len(up.files["outputs/out.mp4"]) == 0 {
		t.Fatalf("stitch: %s; report %s", res.ErrorMessage, rep.JSON())
	}
	q := rep.Quality
	if q == nil || q.Error != "" || q.Frames != 75 || q.Stitched.Frames != 75 || q.SinglePass.Frames != 75 || len(q.Seams) != len(list.Chunks)-1 ||
		q.Stitched.PSNRMean < 20 || q.SinglePass.PSNRMean < 20 || q.VMAF == "" {
		t.Fatalf("quality %s", rep.JSON())
	}
	t.Logf("report %s", rep.JSON())

	// A reference that is no video: the measurement fails, the job does not.
	inputs["broken.nut"] = []byte("not a video")
	res, rep = stitch("broken.nut")
	if !res.Succeeded || !rep.Pass || len(up.files["outputs/out.mp4"]) == 0 {
		t.Fatalf("stitch with a broken reference: %s", res.ErrorMessage)
	}
	if rep.Quality == nil || !strings.Contains(rep.Quality.Error, "inputs/"+mj.ChunkReferenceInput) {
		t.Fatalf("quality with a broken reference: %s", rep.JSON())
	}
}

// runSandboxed runs m as run does, in the bwrap sandbox.
func runSandboxed(t *testing.T, srv *httptest.Server, m mj.Manifest) *mj.Result {
	t.Helper()
	m.JobID, m.Attempt, m.TimeoutSeconds = "job-1", 1, 300
	m.UploadURL = srv.URL + "/up/%7Bpath%7D?sig=ok"
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: testenv.Binary(t, "ffmpeg"), Sandbox: &sandbox.Bwrap{}}
	res, err := r.Run(context.Background(), &m)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}
