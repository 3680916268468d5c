package devstack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"
	"github.com/mediajobs/mediajobs/testenv"
)

// Chunked encoding (docs/chunked.md) on the shared stack: a job that asks for
// "parallel" is planned, split, encoded a chunk per job, stitched and
// verified by real jobs on real Nomad (raw_exec), with real ffmpeg.

// chunkedSource makes a 6 s source (a keyframe every second, AAC audio) of
// size wxh and uploads it as a temporary file; it returns its download link.
func chunkedSource(t *testing.T, size string) string {
	t.Helper()
	b, _ := os.ReadFile(chunkedSourceFile(t, size))
	return e2e.UploadTmp(t, "", e2e.Stack.APIKey, b)
}

// chunkedSourceFile makes the source in a local file.
func chunkedSourceFile(t *testing.T, size string) string {
	t.Helper()
	ff, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "src.mp4")
	out, err := exec.Command(ff, "-v", "error", "-f", "lavfi", "-i", "testsrc=s="+size+":r=25:d=6", "-f", "lavfi", "-i", "sine=f=440:r=48000:d=6",
		"-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-keyint_min", "25", "-sc_threshold", "0", "-c:a", "aac", "-b:a", "64k", p).CombinedOutput()
	if err != nil {
		t.Fatalf("make the source: %v %s", err, out)
	}
	return p
}

func createChunked(t *testing.T, src, cmd string, workers int) string {
	t.Helper()
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files": map[string]string{"src": src}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{cmd}, "timeout_seconds": 600, "webhook_url": e2e.HookURL,
		"parallel": map[string]any{"chunk_seconds": 2, "max_workers": workers}})
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	d := r.Data(t)
	if p, _ := d["parallel"].(map[string]any); p == nil || p["mode"] != "chunked" {
		t.Fatalf("create: %v", d)
	}
	return d["id"].(string)
}

func getJob(t *testing.T, id string) map[string]any {
	return e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)
}

func waitChunked(t *testing.T, id string) map[string]any {
	t.Helper()
	var j map[string]any
	testenv.Eventually(t, 6*time.Minute, "chunked job "+id+" to end", func() bool {
		j = getJob(t, id)
		switch j["status"] {
		case "succeeded", "failed", "cancelled":
			return true
		}
		return false
	})
	return j
}

// parallelStep is a chunked job view's step by name.
func parallelStep(t *testing.T, j map[string]any, name string) map[string]any {
	t.Helper()
	p, _ := j["parallel"].(map[string]any)
	steps, _ := p["steps"].([]any)
	for _, s := range steps {
		if s := s.(map[string]any); s["name"] == name {
			return s
		}
	}
	t.Fatalf("no step %s in %v", name, p)
	return nil
}

// frames counts a file's video frames (its packets).
func frames(t *testing.T, path string) int {
	t.Helper()
	out, err := exec.Command(e2e.Ffprobe, "-v", "error", "-select_streams", "v:0", "-count_packets", "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// A 6 s x264 job split every 2 s: three chunk jobs, the audio and the stitch
// run on Nomad; the job succeeds with a file that plays, as many frames as
// the source, and a verification report that passes; its view shows the
// chunks like a pipeline's steps.
func TestChunkedEndToEnd(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSource(t, "160x120")
	id := createChunked(t, src, "-i {{src}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k -movflags +faststart {{out.mp4}}", 2)
	j := waitChunked(t, id)
	if j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v (%v)", j["status"], j["error_message"], j["parallel"])
	}
	p := j["parallel"].(map[string]any)
	v, _ := p["verification"].(map[string]any)
	if v == nil || v["pass"] != true || v["decoded_frames"] != 150.0 {
		t.Fatalf("verification %v", p["verification"])
	}
	// The encode jobs hashed their chunks' packets in the sandbox, so the
	// stitch decoded the seams alone (docs/chunked.md#reading-the-verification-report).
	if d, _ := p["verification"].(map[string]any)["decode"].(map[string]any); d["mode"] != "seams" || d["clean"] != true {
		t.Fatalf("verification's decode %v, want the seams decoded", d)
	}
	enc := e2e.StepJobs(parallelStep(t, j, "encode"))
	if len(enc) != 3 || enc[1]["item"].(map[string]any)["start"] != "2.000000" {
		t.Fatalf("encode step %v", enc)
	}
	for _, name := range []string{"plan", "audio", "stitch"} {
		if s := parallelStep(t, j, name); s["status"] != "succeeded" {
			t.Fatalf("step %s: %v", name, s)
		}
	}
	if of := j["output_files"].(map[string]any); len(of) != 1 {
		t.Fatalf("output_files %v: want the declared out.mp4 alone (the report is parallel.verification)", of)
	}
	out := e2e.Download(t, j["output_files"].(map[string]any)["out.mp4"].(string))
	if n := frames(t, out); n != 150 {
		t.Fatalf("the output has %d frames, the source 150", n)
	}
	if pr := e2e.Probe(t, out); len(pr["streams"].([]any)) != 2 {
		t.Fatalf("the output's streams: %v", pr["streams"])
	}
	// Its usage is its jobs' (each metered as a job of the account).
	if u, _ := j["usage"].(map[string]any); u == nil || u["cpu_seconds"].(float64) <= 0 {
		t.Fatalf("usage %v", j["usage"])
	}
	// One webhook, the chunked job's, when it ended; none of its jobs has one.
	hook := oneHook(t, id, "job.succeeded")
	if hook.Job["parallel"] == nil {
		t.Fatalf("webhook body %v", hook.Job)
	}
	sameUsage(t, "the webhook's", hook.Job["usage"], j["usage"]) // stored on J at its end
	for _, s := range j["parallel"].(map[string]any)["steps"].([]any) {
		for _, c := range e2e.StepJobs(s.(map[string]any)) {
			if n := len(e2e.Hooks.Calls(c["id"].(string))); n != 0 {
				t.Fatalf("job %v of step %v sent %d webhooks", c["id"], s.(map[string]any)["name"], n)
			}
		}
	}
}

// slowCommand makes each chunk's encode last long enough to be seen running.
const slowCommand = "-i {{src}} -vf scale=1280:720 -c:v libx264 -preset veryslow -crf 20 -c:a aac -b:a 64k {{out.mp4}}"

// runningEncode waits for one of the chunked job's encodes to run and
// returns its id and Nomad job.
func runningEncode(t *testing.T, id string) (string, string) {
	t.Helper()
	var jid, nomad string
	testenv.Eventually(t, 4*time.Minute, "an encode running", func() bool {
		j := getJob(t, id)
		p, _ := j["parallel"].(map[string]any)
		steps, _ := p["steps"].([]any)
		for _, s := range steps {
			s := s.(map[string]any)
			if s["name"] != "encode" {
				continue
			}
			for _, c := range e2e.StepJobs(s) {
				if c["status"] != "running" {
					continue
				}
				stored, err := e2e.Stack.Backends.Store.Job(context.Background(), c["id"].(string))
				if err == nil && stored.NomadJobID != "" && runnerRuns(stored.NomadJobID) {
					jid, nomad = stored.ID, stored.NomadJobID
					return true
				}
			}
		}
		return false
	})
	return jid, nomad
}

// A chunk job whose runner is killed mid-encode is retried alone (its second
// attempt; every other job of the chunked job ran once), and the job still
// succeeds with a report that passes.
func TestChunkedKilledChunkIsRetriedAlone(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSource(t, "160x120")
	id := createChunked(t, src, slowCommand, 2)
	victim, nomad := runningEncode(t, id)
	testenv.Eventually(t, 20*time.Second, "the encode's runner to be killed", func() bool { return e2e.KillRunner(t, nomad) })
	j := waitChunked(t, id)
	if j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v", j["status"], j["error_message"])
	}
	if v, _ := j["parallel"].(map[string]any)["verification"].(map[string]any); v == nil || v["pass"] != true {
		t.Fatalf("verification %v", j["parallel"])
	}
	pl, err := e2e.Stack.Backends.Store.Pipeline(context.Background(), j["parallel"].(map[string]any)["pipeline_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	for _, cid := range pl.JobIDs() {
		c, err := e2e.Stack.Backends.Store.Job(context.Background(), cid)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if cid == victim {
			want = 2
		}
		if c.Attempt != want {
			t.Errorf("job %s (%s): %d attempts, want %d", cid, c.Pipeline.Step, c.Attempt, want)
		}
	}
}

// Cancelling a chunked job while its chunks encode cancels every job of its
// pipeline: none runs on, none is left queued.
func TestChunkedCancelStopsEveryChunk(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSource(t, "160x120")
	id := createChunked(t, src, slowCommand, 1)
	_, nomad := runningEncode(t, id)
	r := e2e.Call(t, "POST", "/api/jobs/"+id+"/cancel", e2e.Stack.APIKey, nil)
	if r.Status != 200 || r.Data(t)["status"] != "cancelled" {
		t.Fatalf("cancel: HTTP %d %s", r.Status, r.Body)
	}
	j := getJob(t, id)
	pid := j["parallel"].(map[string]any)["pipeline_id"].(string)
	testenv.Eventually(t, time.Minute, "every job of the pipeline ended", func() bool {
		pl, err := e2e.Stack.Backends.Store.Pipeline(context.Background(), pid)
		if err != nil || len(pl.Plan) > 0 {
			return false
		}
		for _, cid := range pl.JobIDs() {
			c, err := e2e.Stack.Backends.Store.Job(context.Background(), cid)
			if err != nil || !c.Status.Terminal() {
				return false
			}
		}
		return true
	})
	pl, _ := e2e.Stack.Backends.Store.Pipeline(context.Background(), pid)
	cancelled := 0
	for _, cid := range pl.JobIDs() {
		if c, _ := e2e.Stack.Backends.Store.Job(context.Background(), cid); c.Status == "cancelled" {
			cancelled++
		}
	}
	if cancelled < 3 { // the running encode, the ones after it and the stitch at least
		t.Fatalf("%d of the pipeline's %d jobs cancelled", cancelled, len(pl.JobIDs()))
	}
	testenv.Eventually(t, 30*time.Second, "the running encode's processes to end", func() bool { return !runnerRuns(nomad) })
	if j := getJob(t, id); j["status"] != "cancelled" {
		t.Fatalf("the chunked job is %v after its cancel", j["status"])
	}
	oneHook(t, id, "job.cancelled")
}

// The source may be another job's output (job:<id>/<output>), that job still
// running when the chunked job is created: the plan step waits for it, and
// the chunked job succeeds with the whole source's frames.
func TestChunkedFromAnotherJobsOutput(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSource(t, "160x120")
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files": map[string]string{"in": src}, "output_files": []string{"copy.mp4"},
		"ffmpeg_commands": []string{"-re -i {{in}} -c copy {{copy.mp4}}"}})
	if r.Status != 200 {
		t.Fatalf("create the source's job: HTTP %d %s", r.Status, r.Body)
	}
	dep := r.Data(t)["id"].(string)
	id := createChunked(t, "job:"+dep+"/copy.mp4", "-i {{src}} -c:v libx264 -preset veryfast -crf 30 -c:a aac {{out.mp4}}", 4)
	if j := getJob(t, id); j["status"] == "succeeded" || len(j["input_files"].(map[string]any)) != 1 {
		t.Fatalf("created: %v", j)
	}
	j := waitChunked(t, id)
	if j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v", j["status"], j["error_message"])
	}
	if v, _ := j["parallel"].(map[string]any)["verification"].(map[string]any); v == nil || v["pass"] != true || v["decoded_frames"] != 150.0 {
		t.Fatalf("verification %v", j["parallel"])
	}
	plan := e2e.StepJobs(parallelStep(t, j, "plan"))[0]
	if s := plan["status_detail"]; s != "" {
		t.Fatalf("plan job's detail after it ran: %v", s)
	}
}

// `mediajobs run --chunk-seconds 2` with a local file: a dry run says how it
// would be split; the run uploads the file, follows the chunked job and
// saves a stitched file with every frame of the source.
func TestCLIRunParallel(t *testing.T) {
	e2e.NeedStack(t)
	in := chunkedSourceFile(t, "160x120")
	outDir := filepath.Join(t.TempDir(), "out")
	args := []string{"-i", "src=" + in, "-o", "out.mp4", "-d", outDir, "--chunk-seconds", "2", "--max-workers", "2", "--",
		"-i", "{{src}}", "-c:v", "libx264", "-preset", "veryfast", "-c:a", "aac", "{{out.mp4}}"}
	code, stdout, stderr := cli(t, append([]string{"run", "--dry-run"}, args...)...)
	if code != 0 || !strings.Contains(stdout, "in chunks of about 2 s, at most 2 at once") || !strings.Contains(stdout, "stitch: ") {
		t.Fatalf("run --dry-run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = cli(t, append([]string{"run"}, args...)...)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if n := frames(t, filepath.Join(outDir, "out.mp4")); n != 150 {
		t.Fatalf("the saved output has %d frames, the source 150\n%s", n, stdout)
	}
	// Its last line, and `jobs wait`'s, show the chunks and the verdict.
	if !strings.Contains(stdout, " succeeded (chunks 3/3 done; verification passed)") {
		t.Fatalf("run's output shows no progress across the chunks:\n%s", stdout)
	}
	id := strings.Fields(stdout[strings.Index(stdout, "job ")+4:])[0]
	if code, out, errOut := cli(t, "jobs", "wait", id); code != 0 || !strings.Contains(out, "job "+id+" succeeded (chunks 3/3 done; verification passed)") {
		t.Fatalf("jobs wait: exit %d\n%s\n%s", code, out, errOut)
	}
	// A command that cannot be split is refused, naming why.
	code, stdout, stderr = cli(t, "run", "--parallel", "-i", "src="+in, "-o", "out.mp4", "-d", outDir, "--", "-i", "{{src}}", "-vf", "fade=t=in:st=0:d=1", "-c:v", "libx264", "{{out.mp4}}")
	if code != 1 || !strings.Contains(stderr, "fade") {
		t.Fatalf("run of an unsplittable command: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
