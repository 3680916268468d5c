package runner

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// A 3 s source with AAC audio, a keyframe every 12 frames at 25 fps.
func chunkSource(t *testing.T) []byte {
	ff := testenv.Binary(t, "ffmpeg")
	p := filepath.Join(t.TempDir(), "src.mp4")
	out, err := exec.Command(ff, "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=128x96:r=25:d=3", "-f", "lavfi", "-i", "sine=f=440:r=48000:d=3",
		"-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-keyint_min", "12", "-sc_threshold", "0", "-c:a", "aac", "-b:a", "64k", p).CombinedOutput()
	if err != nil {
		t.Fatalf("make the source: %v %s", err, out)
	}
	b, _ := os.ReadFile(p)
	return b
}

// The phases of a chunked job, each run as the runner runs a job: the plan
// probes the source and splits it (plan.json, chunks.json, a file per chunk),
// each chunk is encoded by its own run, the audio once, and the stitch joins
// them and publishes the output with a report that passes. A stitch given
// its chunks in the wrong order fails its verification and publishes no file.
func TestChunkedPhases(t *testing.T) {
	inputs := map[string][]byte{"src.mp4": chunkSource(t)}
	srv, up := newServer(t, inputs)
	user := "-i {{video}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k -movflags +faststart {{out.mp4}}"
	task := func(phase string) *mj.ChunkTask {
		return &mj.ChunkTask{Phase: phase, Input: "video", Output: "out.mp4"}
	}
	in := func(name string) string { return srv.URL + "/in/" + name }
	take := func(prefix string, names ...string) { takeUploads(t, up, inputs, prefix, names...) }

	plan := task(mj.PhasePlan)
	plan.ChunkSeconds, plan.MaxChunks = 1, 64
	res := run(t, srv, mj.Manifest{InputFiles: map[string]string{"video": in("src.mp4")}, OutputNames: []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkSplitPattern},
		FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: plan})
	if !res.Succeeded {
		t.Fatalf("plan: %s", res.ErrorMessage)
	}
	var list mj.ChunkList
	if err := json.Unmarshal(up.files["outputs/"+mj.ChunkListFile], &list); err != nil || len(list.Chunks) < 2 || !list.Aux {
		t.Fatalf("chunks.json %s: %v", up.files["outputs/"+mj.ChunkListFile], err)
	}
	take("plan/", mj.ChunkPlanFile)
	for i := range list.Chunks {
		take("plan/", mj.ChunkFileName(i))
	}

	for i, c := range list.Chunks {
		enc := task(mj.PhaseEncode)
		enc.Chunk = c
		res := run(t, srv, mj.Manifest{InputFiles: map[string]string{"chunk": in("plan/" + mj.ChunkFileName(i))}, OutputNames: []string{mj.ChunkFileName(i), mj.ChunkHashesFileName(i)},
			FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: enc})
		if !res.Succeeded {
			t.Fatalf("encode %d: %s", i, res.ErrorMessage)
		}
		take("enc/", mj.ChunkFileName(i), mj.ChunkHashesFileName(i))
	}
	res = run(t, srv, mj.Manifest{InputFiles: map[string]string{"video": in("src.mp4")}, OutputNames: []string{mj.AuxFileName("out.mp4")},
		FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: task(mj.PhaseAudio)})
	if !res.Succeeded {
		t.Fatalf("audio: %s", res.ErrorMessage)
	}
	take("", mj.AuxFileName("out.mp4"))

	// order: which encode's chunk (and hashes, hashOrder) each input takes.
	stitch := func(order, hashOrder func(i int) int) *mj.Result {
		s := task(mj.PhaseStitch)
		s.Chunks = len(list.Chunks)
		files := map[string]string{"plan": in("plan/" + mj.ChunkPlanFile), "aux": in(mj.AuxFileName("out.mp4"))}
		for i := range list.Chunks {
			files[mj.ChunkInputName(i)] = in("enc/" + mj.ChunkFileName(order(i)))
			files[mj.ChunkHashesInputName(i)] = in("enc/" + mj.ChunkHashesFileName(hashOrder(i)))
		}
		for k := range up.files {
			delete(up.files, k)
		}
		return run(t, srv, mj.Manifest{InputFiles: files, OutputNames: []string{"out.mp4", mj.ChunkVerification},
			FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: s})
	}
	same := func(i int) int { return i }
	res = stitch(same, same)
	if !res.Succeeded {
		t.Fatalf("stitch: %s", res.ErrorMessage)
	}
	var rep struct {
		Pass          bool `json:"pass"`
		DecodedFrames int  `json:"decoded_frames"`
	}
	if err := json.Unmarshal(up.files["outputs/"+mj.ChunkVerification], &rep); err != nil || !rep.Pass || rep.DecodedFrames != 75 {
		t.Fatalf("verification %s: %v", up.files["outputs/"+mj.ChunkVerification], err)
	}
	if len(up.files["outputs/out.mp4"]) == 0 {
		t.Fatal("the stitched file was not uploaded")
	}

	n := len(list.Chunks)
	reverse := func(i int) int { return n - 1 - i }
	res = stitch(reverse, reverse)
	if res.Succeeded || !strings.Contains(res.ErrorMessage, "failed its verification") {
		t.Fatalf("a stitch of the chunks in reverse: succeeded %v, %q", res.Succeeded, res.ErrorMessage)
	}
	if _, ok := up.files["outputs/out.mp4"]; ok {
		t.Fatal("a file that failed its verification was uploaded")
	}
	// Its report comes back in the job's analysis.
	var failed struct {
		Pass     bool     `json:"pass"`
		Failures []string `json:"failures"`
	}
	if len(res.Analysis) != 1 || res.Analysis[0].Filter != mj.ChunkVerifyFilter || json.Unmarshal(res.Analysis[0].Data, &failed) != nil || failed.Pass || len(failed.Failures) == 0 {
		t.Fatalf("the failed verification's analysis: %+v", res.Analysis)
	}

	// The chunks in order, but chunk 0's hashes from another encode: the
	// stitch decodes only the stitched file, and checks it against the
	// hashes the encodes wrote.
	res = stitch(same, func(i int) int { return (i + 1) % n })
	if res.Succeeded || !strings.Contains(res.ErrorMessage, "chunk 0 decoded alone differs from the stitched file's frames") {
		t.Fatalf("a stitch with chunk 0's hashes from chunk 1: succeeded %v, %q", res.Succeeded, res.ErrorMessage)
	}
	if _, ok := up.files["outputs/out.mp4"]; ok {
		t.Fatal("a file that failed its verification was uploaded")
	}
}

// takeUploads moves what the last run uploaded (names, under outputs/) to
// the inputs the next runs fetch, under prefix.
func takeUploads(t *testing.T, up *uploads, inputs map[string][]byte, prefix string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, ok := up.files["outputs/"+n]
		if !ok {
			t.Fatalf("no upload of %s: %v", n, uploadNames(up.files))
		}
		inputs[prefix+n] = b
	}
}

func uploadNames(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
