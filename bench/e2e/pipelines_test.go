package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pipelines (docs/pipelines.md; figures in docs/benchmarks.md, "Pipelines"),
// each beside the same jobs created one by one in the same run and stack:
//
//   - BenchmarkPipelineEdges, BenchmarkPipelineEdgesWarm: a chain of chainSteps
//     trivial steps, POST /api/pipelines → the pipeline's end recorded as
//     succeeded, against the sum of the same jobs' own POST → succeeded, run
//     one after another, each taking the previous one's output by a reference
//     (job:<id>/o.png); on the per-job pool, and on the warm pool.
//   - BenchmarkPipelineLadder: the worked ladder of docs/pipelines.md (five
//     renditions fanned out, an HLS master playlist fanned in, a thumbnail
//     strip beside), small, against its critical path: the slowest rendition
//     plus the playlist, each run alone as a job (or the strip, if slower).
//
// On this harness's one Nomad dev agent, not `make cluster`: the ladder's
// renditions share the machine's cores, so its ratio counts that contention
// as well as the pipeline's own waits.

var pipeRounds = flag.Int("e2e.piperounds", 3, "BenchmarkPipelineEdges, BenchmarkPipelineLadder: rounds (the pipeline and its jobs one by one) per iteration; BenchmarkPipelineEdgesWarm runs three times as many")

const chainSteps = 10

// chainJob is step i of the chain: the first draws a 32×32 PNG with lavfi,
// each other one reads the previous one's and writes it back inverted. in is
// the previous output's reference; machine "" is the default (per-job) pool.
func chainJob(i int, in, machine string) map[string]any {
	j := map[string]any{"output_files": []string{"o.png"}}
	if i == 0 {
		j["ffmpeg_commands"] = []string{"-f lavfi -i color=c=red:s=32x32:d=0.1 -frames:v 1 {{o.png}}"}
	} else {
		j["input_files"] = map[string]string{"prev": in}
		j["ffmpeg_commands"] = []string{"-i {{prev}} -vf negate -frames:v 1 {{o.png}}"}
	}
	if machine != "" {
		j["machine"], j["timeout_seconds"] = machine, 30
	}
	return j
}

func stepName(i int) string { return fmt.Sprintf("s%02d", i) }

// postJSON POSTs v to the gateway at path and decodes the answer's data into out.
func (e *env) postJSON(ctx context.Context, path string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", e.gwURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("POST %s: HTTP %d %s", path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, &struct {
		Data any `json:"data"`
	}{out})
}

// pipelineRun is one pipeline, timed from before its POST to the watch event
// that shows its end recorded (what GET /api/pipelines/{id} and its webhook
// report), with its record at the end.
type pipelineRun struct {
	took time.Duration
	p    *mj.Pipeline
}

// runPipeline creates doc and waits for the pipeline's end.
func (e *env) runPipeline(ctx context.Context, doc map[string]any) (pipelineRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	var created struct {
		ID string `json:"id"`
	}
	if err := e.postJSON(ctx, "/api/pipelines", doc, &created); err != nil {
		return pipelineRun{}, err
	}
	p, err := e.waitPipelineEnd(ctx, created.ID)
	end := time.Now()
	if err != nil {
		return pipelineRun{}, err
	}
	if p.Status != mj.StatusSucceeded {
		return pipelineRun{}, fmt.Errorf("pipeline %s is %s, not succeeded: %s", p.ID, p.Status, p.ErrorMessage)
	}
	return pipelineRun{took: end.Sub(start), p: p}, nil
}

// waitPipelineEnd watches the pipeline's record until its end is recorded.
func (e *env) waitPipelineEnd(ctx context.Context, id string) (*mj.Pipeline, error) {
	p, err := e.st.Pipeline(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Status != "" {
		return p, nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range e.emb.Client.Watch(wctx, prefix+"pipelines/"+id, clientv3.WithRev(p.Revision+1)) {
		if err := resp.Err(); err != nil {
			return nil, err
		}
		for _, ev := range resp.Events {
			var next mj.Pipeline
			if ev.Kv != nil && json.Unmarshal(ev.Kv.Value, &next) == nil && next.Status != "" {
				return &next, nil
			}
		}
	}
	return nil, fmt.Errorf("pipeline %s: no end recorded (%v)", id, ctx.Err())
}

// jobRun is one job, POST → succeeded, as mediajobsSample times one, with
// its record at the end.
func (e *env) jobRun(ctx context.Context, body map[string]any) (*mj.Job, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	id, err := e.create(ctx, raw)
	if err != nil {
		return nil, 0, err
	}
	j, err := e.st.WaitJob(ctx, id, func(j *mj.Job) bool { return j.Status.Terminal() })
	took := time.Since(start)
	if err != nil {
		return nil, 0, err
	}
	if j.Status != mj.StatusSucceeded {
		return nil, 0, fmt.Errorf("job %s is %s, not succeeded: %s%s", id, j.Status, j.ErrorMessage, j.StatusDetail)
	}
	return j, took, nil
}

func workerPath(j *mj.Job) string {
	if j.Worker == nil {
		return ""
	}
	return j.Worker.Path
}

// span is a job's time from entering its pool's queue (created, or released
// once what it awaits exists) to its end, as its record says.
func span(j *mj.Job) time.Duration {
	if j.FinishedAt == nil {
		return 0
	}
	return j.FinishedAt.Sub(j.QueuedAt)
}

// chainResult is one round of the edge benchmark.
type chainResult struct {
	pipe, jobs time.Duration // the pipeline; its jobs one by one, summed
	warm       int           // jobs of both that ran on a warm runner
	release    []time.Duration
	// Each job's span (queued → finished), in the pipeline and alone.
	pipeSpans, jobSpans []time.Duration
}

// chainRound runs the chain as a pipeline and as jobs one after another,
// the jobs first when jobsFirst (rounds alternate, so that a drift of the
// machine's load favours neither).
func (e *env) chainRound(ctx context.Context, machine string, jobsFirst bool) (c chainResult, err error) {
	if jobsFirst {
		if err := e.chainJobs(ctx, machine, &c); err != nil {
			return c, err
		}
	}
	steps := map[string]any{}
	for i := range chainSteps {
		steps[stepName(i)] = chainJob(i, "step:"+stepName(i-1)+"/o.png", machine)
	}
	if machine != "" {
		if err := e.waitWarmIdle(ctx, *warmRunners); err != nil {
			return c, err
		}
	}
	r, err := e.runPipeline(ctx, map[string]any{"steps": steps})
	if err != nil {
		return c, err
	}
	c.pipe = r.took
	byStep, err := e.pipelineJobs(ctx, r.p)
	if err != nil {
		return c, err
	}
	for i := range chainSteps {
		j := byStep[stepName(i)][0]
		if workerPath(j) == mj.WorkerWarm {
			c.warm++
		}
		c.pipeSpans = append(c.pipeSpans, span(j))
		if i > 0 {
			c.release = append(c.release, releaseLag(j, byStep[stepName(i-1)]))
		}
	}
	if !jobsFirst {
		err = e.chainJobs(ctx, machine, &c)
	}
	return c, err
}

// chainJobs runs the chain's jobs one after another, each created once the
// one before succeeded.
func (e *env) chainJobs(ctx context.Context, machine string, c *chainResult) error {
	if machine != "" {
		if err := e.waitWarmIdle(ctx, *warmRunners); err != nil {
			return err
		}
	}
	prev := ""
	for i := range chainSteps {
		j, took, err := e.jobRun(ctx, chainJob(i, "job:"+prev+"/o.png", machine))
		if err != nil {
			return fmt.Errorf("job %d of the chain: %w", i, err)
		}
		if workerPath(j) == mj.WorkerWarm {
			c.warm++
		}
		c.jobs += took
		c.jobSpans = append(c.jobSpans, span(j))
		prev = j.ID
	}
	return nil
}

// pipelineJobs reads p's jobs, by step, in item order.
func (e *env) pipelineJobs(ctx context.Context, p *mj.Pipeline) (map[string][]*mj.Job, error) {
	out := map[string][]*mj.Job{}
	for _, st := range p.Steps {
		jobs, errs := e.st.Jobs(ctx, st.Jobs)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("pipeline %s, step %s: %w", p.ID, st.Name, err)
			}
		}
		out[st.Name] = jobs
	}
	return out, nil
}

// releaseLag is how long j waited, queued outside its pool's queue, after the
// last of the jobs it takes outputs of had ended: from that job's finished_at
// to j's queued_at (set when it is released into the queue).
func releaseLag(j *mj.Job, before []*mj.Job) time.Duration {
	var last time.Time
	for _, b := range before {
		if b.FinishedAt != nil && b.FinishedAt.After(last) {
			last = *b.FinishedAt
		}
	}
	return j.QueuedAt.Sub(last)
}

// benchEdges runs rounds chain rounds per iteration and reports the
// medians: the pipeline's time, the sum of its jobs' own, their ratio and the
// time added per edge (chainSteps-1 of them); and, from the jobs' records, how
// long a step waited after the one before ended and each job's span (queued →
// finished) in the pipeline and alone.
func benchEdges(b *testing.B, e *env, machine string, rounds int) {
	ctx := context.Background()
	var pipes, sums, ratios, perEdge []float64
	var release, pipeSpans, jobSpans []time.Duration
	warm, jobs := 0, 0
	b.ResetTimer()
	for range b.N {
		for i := range rounds {
			c, err := e.chainRound(ctx, machine, i%2 == 1)
			if err != nil {
				b.Fatal(err)
			}
			p, s := c.pipe, c.jobs
			b.Logf("chain of %d on %q: pipeline %.3f s, its jobs one by one %.3f s (%.2f ×), %d of %d jobs warm; "+
				"a step's end → the next queued: %v; spans (queued → finished) in the pipeline %v, alone %v",
				chainSteps, machine, p.Seconds(), s.Seconds(), p.Seconds()/s.Seconds(), c.warm, 2*chainSteps,
				roundMS(c.release), roundMS(c.pipeSpans), roundMS(c.jobSpans))
			release = append(release, c.release...)
			pipeSpans, jobSpans = append(pipeSpans, c.pipeSpans...), append(jobSpans, c.jobSpans...)
			pipes, sums = append(pipes, p.Seconds()), append(sums, s.Seconds())
			ratios = append(ratios, p.Seconds()/s.Seconds())
			perEdge = append(perEdge, (p-s).Seconds()/(chainSteps-1))
			warm, jobs = warm+c.warm, jobs+2*chainSteps
		}
	}
	b.StopTimer()
	b.ReportMetric(chainSteps, "steps")
	b.ReportMetric(medianF(pipes), "pipeline-s")
	b.ReportMetric(medianF(sums), "jobs-sum-s")
	b.ReportMetric(medianF(ratios), "ratio")
	b.ReportMetric(medianF(perEdge), "added-per-edge-s")
	b.ReportMetric(quantile(release, 0.5).Seconds(), "release-p50-s")
	b.ReportMetric(quantile(pipeSpans, 0.5).Seconds(), "pipe-span-p50-s")
	b.ReportMetric(quantile(jobSpans, 0.5).Seconds(), "jobs-span-p50-s")
	if machine != "" {
		b.ReportMetric(100*float64(warm)/float64(jobs), "warm-share-%")
	}
}

// roundMS rounds durations to the millisecond, for the log.
func roundMS(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// BenchmarkPipelineEdges: the chain on the per-job pool (a Nomad dispatch per
// job).
func BenchmarkPipelineEdges(b *testing.B) {
	benchEdges(b, getEnv(b), "", *pipeRounds)
}

// BenchmarkPipelineEdgesWarm: the chain on the warm pool, its runners waiting
// for work before the pipeline and before the jobs. A round takes seconds, and
// a warm job's time varies by a good part of itself on a loaded machine: three
// times as many rounds.
func BenchmarkPipelineEdgesWarm(b *testing.B) {
	e := getEnv(b)
	warmUp(b, e)
	benchEdges(b, e, warmPool, 3**pipeRounds)
}

// The ladder's renditions: the worked example's five, scaled to a 240-line
// source so that the benchmark runs in seconds on a small machine.
var ladderRungs = []struct{ height, bitrate string }{
	{"120", "150k"}, {"144", "200k"}, {"180", "300k"}, {"216", "400k"}, {"240", "500k"},
}

// ladderSource writes a 4 s 320×240 clip with sound and serves it on loopback.
func (e *env) ladderSource(b *testing.B) string {
	b.Helper()
	dir := filepath.Join(e.dir, "ladder-src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(e.ffmpeg, "-hide_banner", "-loglevel", "error", "-y",
		"-f", "lavfi", "-i", "testsrc=size=320x240:rate=25:duration=4", "-f", "lavfi", "-i", "sine=duration=4",
		"-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-c:a", "aac", "-shortest", filepath.Join(dir, "src.mp4")).CombinedOutput()
	if err != nil {
		b.Fatalf("ladder source: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir))}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/src.mp4"
}

const (
	rungCommand   = "-i {{src}} -vf scale=-2:%s -c:v libx264 -preset ultrafast -g 25 -b:v %s -c:a aac -b:a 64k {{r%s.mp4}}"
	thumbsCommand = "-i {{src}} -vf fps=1,scale=64:-2,tile=4x1 -frames:v 1 {{strip.jpg}}"
	hlsTail       = "-c copy -f hls -hls_time 1 -hls_playlist_type vod -var_stream_map \"%s\" -master_pl_name master.m3u8 -hls_segment_filename {{v%%v/seg_%%03d.ts}} {{v%%v/index.m3u8}}"
)

var hlsOutputs = []string{"master.m3u8", "v%v/index.m3u8", "v%v/seg_%03d.ts"}

// ladderDoc is docs/pipelines.md's worked ladder on src, with ladderRungs.
func ladderDoc(src string) map[string]any {
	var items []map[string]string
	for _, r := range ladderRungs {
		items = append(items, map[string]string{"height": r.height, "bitrate": r.bitrate})
	}
	return map[string]any{"steps": map[string]any{
		"rung": map[string]any{
			"input_files":     map[string]string{"src": src},
			"output_files":    []string{"r${item.height}.mp4"},
			"ffmpeg_commands": []string{fmt.Sprintf(rungCommand, "${item.height}", "${item.bitrate}", "${item.height}")},
			"for_each":        items,
		},
		"hls": map[string]any{
			"input_files":  map[string]string{"r": "step:rung[*]/r${item.height}.mp4"},
			"output_files": hlsOutputs,
			"ffmpeg_commands": []string{"${each:r:-i {{r}}} ${each:r:-map ${index}:v -map ${index}:a} " +
				fmt.Sprintf(hlsTail, "${each:r:v:${index},a:${index},name:${item.height}p}")},
		},
		"thumbs": map[string]any{
			"input_files":     map[string]string{"src": src},
			"output_files":    []string{"strip.jpg"},
			"ffmpeg_commands": []string{thumbsCommand},
		},
	}}
}

// ladderRun is the ladder's jobs alone: POST → succeeded of each, and their
// records.
type ladderRun struct {
	rungs       []time.Duration
	hls, thumbs time.Duration
	rungJobs    []*mj.Job
	hlsJob      *mj.Job
}

// ladderJobs runs the ladder's jobs alone, one after another: the renditions,
// the playlist over them (taking their outputs by reference), the strip.
func (e *env) ladderJobs(ctx context.Context, src string) (l ladderRun, err error) {
	in := map[string]string{}
	var inputs, maps, streams []string
	for i, r := range ladderRungs {
		j, took, err := e.jobRun(ctx, map[string]any{
			"input_files":     map[string]string{"src": src},
			"output_files":    []string{"r" + r.height + ".mp4"},
			"ffmpeg_commands": []string{fmt.Sprintf(rungCommand, r.height, r.bitrate, r.height)},
		})
		if err != nil {
			return l, fmt.Errorf("rendition %s: %w", r.height, err)
		}
		l.rungs, l.rungJobs = append(l.rungs, took), append(l.rungJobs, j)
		in[fmt.Sprintf("r_%d", i)] = "job:" + j.ID + "/r" + r.height + ".mp4"
		inputs = append(inputs, fmt.Sprintf("-i {{r_%d}}", i))
		maps = append(maps, fmt.Sprintf("-map %d:v -map %d:a", i, i))
		streams = append(streams, fmt.Sprintf("v:%d,a:%d,name:%sp", i, i, r.height))
	}
	if l.hlsJob, l.hls, err = e.jobRun(ctx, map[string]any{
		"input_files":  in,
		"output_files": hlsOutputs,
		"ffmpeg_commands": []string{strings.Join(inputs, " ") + " " + strings.Join(maps, " ") + " " +
			fmt.Sprintf(hlsTail, strings.Join(streams, " "))},
	}); err != nil {
		return l, fmt.Errorf("playlist: %w", err)
	}
	if _, l.thumbs, err = e.jobRun(ctx, map[string]any{
		"input_files": map[string]string{"src": src}, "output_files": []string{"strip.jpg"}, "ffmpeg_commands": []string{thumbsCommand},
	}); err != nil {
		return l, fmt.Errorf("strip: %w", err)
	}
	return l, nil
}

// BenchmarkPipelineLadder runs the ladder as a pipeline, then its jobs alone,
// *pipeRounds* times per iteration, and reports the medians: the pipeline's
// time, its critical path (the slowest rendition plus the playlist, each
// alone, or the strip if that is longer), their ratio, and the jobs' serial
// sum. From the records, where the pipeline's time went: its create to the
// last rendition's end (the renditions and the strip share the machine
// meanwhile), that end to the playlist queued, the playlist's span (queued →
// finished) beside its span alone, and its end to the pipeline's.
func BenchmarkPipelineLadder(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	src := e.ladderSource(b)
	doc := ladderDoc(src)
	var pipes, crits, ratios, sums, fanouts, rungAlone, release, hlsPipe, hlsAlone, ends []float64
	b.ResetTimer()
	for range b.N {
		for range *pipeRounds {
			r, err := e.runPipeline(ctx, doc)
			if err != nil {
				b.Fatal("ladder pipeline: ", err)
			}
			steps, err := e.pipelineJobs(ctx, r.p)
			if err != nil {
				b.Fatal(err)
			}
			hlsJob := steps["hls"][0]
			var lastRung time.Time
			for _, j := range steps["rung"] {
				if j.FinishedAt != nil && j.FinishedAt.After(lastRung) {
					lastRung = *j.FinishedAt
				}
			}
			fanout, rel, end := lastRung.Sub(r.p.CreatedAt), releaseLag(hlsJob, steps["rung"]), time.Duration(0)
			if r.p.FinishedAt != nil && hlsJob.FinishedAt != nil {
				end = r.p.FinishedAt.Sub(*hlsJob.FinishedAt)
			}
			l, err := e.ladderJobs(ctx, src)
			if err != nil {
				b.Fatal("ladder jobs: ", err)
			}
			slowest, slowestSpan, sum := time.Duration(0), time.Duration(0), l.hls+l.thumbs
			for i, d := range l.rungs {
				slowest, slowestSpan, sum = max(slowest, d), max(slowestSpan, span(l.rungJobs[i])), sum+d
			}
			crit := max(slowest+l.hls, l.thumbs)
			b.Logf("ladder: pipeline %.3f s, critical path %.3f s (%.2f ×); alone: renditions %v, playlist %v, strip %v; "+
				"in the pipeline: create → last rendition's end %v, → the playlist queued %v, its span %v (alone %v), its end → the pipeline's %v",
				r.took.Seconds(), crit.Seconds(), r.took.Seconds()/crit.Seconds(), roundMS(l.rungs), l.hls.Round(time.Millisecond), l.thumbs.Round(time.Millisecond),
				fanout.Round(time.Millisecond), rel.Round(time.Millisecond), span(hlsJob).Round(time.Millisecond), span(l.hlsJob).Round(time.Millisecond), end.Round(time.Millisecond))
			pipes, crits, sums = append(pipes, r.took.Seconds()), append(crits, crit.Seconds()), append(sums, sum.Seconds())
			ratios = append(ratios, r.took.Seconds()/crit.Seconds())
			fanouts, rungAlone, release = append(fanouts, fanout.Seconds()), append(rungAlone, slowestSpan.Seconds()), append(release, rel.Seconds())
			hlsPipe, hlsAlone, ends = append(hlsPipe, span(hlsJob).Seconds()), append(hlsAlone, span(l.hlsJob).Seconds()), append(ends, end.Seconds())
		}
	}
	b.StopTimer()
	b.ReportMetric(medianF(pipes), "pipeline-s")
	b.ReportMetric(medianF(crits), "critical-s")
	b.ReportMetric(medianF(ratios), "ratio")
	b.ReportMetric(medianF(sums), "jobs-sum-s")
	b.ReportMetric(medianF(fanouts), "fanout-s")
	b.ReportMetric(medianF(rungAlone), "rung-span-alone-s")
	b.ReportMetric(medianF(release), "release-p50-s")
	b.ReportMetric(medianF(hlsPipe), "hls-span-s")
	b.ReportMetric(medianF(hlsAlone), "hls-span-alone-s")
	b.ReportMetric(medianF(ends), "end-s")
}
