package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Creating a pipeline (docs/pipelines.md, issue 33) beside creating the same
// jobs one request at a time, in the same process and store:
//
//   - BenchmarkCreatePipeline: one POST /api/pipelines of pipelineSteps steps
//     in a chain (each step createBody's job, taking the previous step's
//     output), answered once every job is stored (materialised).
//   - BenchmarkCreatePipelineJobs: the same jobs as pipelineSteps POST
//     /api/ffmpeg one after another, each taking the previous job's output by a
//     reference (job:<id>/out.mp4), as a client gluing them together would.
//
// One op is the whole set in both, so ops/s and allocs/op compare directly.
// Each runs from Clients clients at once (throughput, as the other gateway
// benchmarks) and, as *Serial, from one client one op after another (what one
// client waits for its set of jobs).

// pipelineSteps is the steps of the benchmark's pipeline; startEnv raises the
// config's max_steps (default 50) to it.
const pipelineSteps = 100

// stepCommand is createBody's command.
const stepCommand = "-i {{video}} -c:v libx264 -preset veryfast -crf 23 -vf scale=1280:-2 -c:a aac -b:a 128k {{out.mp4}}"

const stepInput = "https://media.example.com/uploads/2024/06/clip-000123.mp4"

// chainBody is the job of step i: the first reads stepInput, each other one
// the output prev names.
func chainBody(i int, prev string) map[string]any {
	in := stepInput
	if i > 0 {
		in = prev
	}
	return map[string]any{"input_files": map[string]string{"video": in}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{stepCommand}}
}

// pipelineDoc is the chain as one pipeline document.
func pipelineDoc(n int) []byte {
	steps := make(map[string]any, n)
	for i := range n {
		steps[fmt.Sprintf("s%03d", i)] = chainBody(i, fmt.Sprintf("step:s%03d/out.mp4", i-1))
	}
	b, _ := json.Marshal(map[string]any{"steps": steps})
	return b
}

// createPipeline POSTs doc and returns the pipeline's id and its jobs' count.
func (e *env) createPipeline(ctx context.Context, doc []byte) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", e.gwURL+"/api/pipelines", bytes.NewReader(doc))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode != 200 {
		return "", 0, fmt.Errorf("POST /api/pipelines: HTTP %d %s", resp.StatusCode, raw)
	}
	var out struct {
		Data struct {
			ID    string `json:"id"`
			Steps []struct {
				Jobs []struct {
					ID string `json:"id"`
				} `json:"jobs"`
			} `json:"steps"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Data.ID == "" {
		return "", 0, fmt.Errorf("POST /api/pipelines: no id in %.300s (%v)", raw, err)
	}
	n := 0
	for _, s := range out.Data.Steps {
		n += len(s.Jobs)
	}
	return out.Data.ID, n, nil
}

// createChain creates n jobs one after another, each taking the previous one's
// output.
func (e *env) createChain(ctx context.Context, n int) error {
	prev := ""
	for i := range n {
		body, _ := json.Marshal(chainBody(i, "job:"+prev+"/out.mp4"))
		id, err := testenv.CreateJob(ctx, e.client, e.gwURL, e.secret, body)
		if err != nil {
			return fmt.Errorf("job %d of the chain: %w", i, err)
		}
		prev = id
	}
	return nil
}

// unmaterialised counts the pipelines whose jobs are not all stored yet
// (pmat/ keys): none once every create has answered.
func (e *env) unmaterialised(ctx context.Context) (int64, error) {
	resp, err := e.emb.Client.Get(ctx, prefix+"pmat/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

func BenchmarkCreatePipeline(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	doc := pipelineDoc(pipelineSteps)
	run(b, func(int) error {
		_, n, err := e.createPipeline(ctx, doc)
		if err == nil && n != pipelineSteps {
			err = fmt.Errorf("the pipeline lists %d jobs, not %d", n, pipelineSteps)
		}
		return err
	})
	if n, err := e.unmaterialised(ctx); err != nil || n != 0 {
		b.Fatalf("%d pipelines with jobs not stored after their creates answered (%v)", n, err)
	}
	b.ReportMetric(pipelineSteps, "jobs/op")
}

func BenchmarkCreatePipelineJobs(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	run(b, func(int) error { return e.createChain(ctx, pipelineSteps) })
	b.ReportMetric(pipelineSteps, "jobs/op")
}

func BenchmarkCreatePipelineSerial(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	doc := pipelineDoc(pipelineSteps)
	serial(b, func() error {
		_, n, err := e.createPipeline(ctx, doc)
		if err == nil && n != pipelineSteps {
			err = fmt.Errorf("the pipeline lists %d jobs, not %d", n, pipelineSteps)
		}
		return err
	})
	if n, err := e.unmaterialised(ctx); err != nil || n != 0 {
		b.Fatalf("%d pipelines with jobs not stored after their creates answered (%v)", n, err)
	}
	b.ReportMetric(pipelineSteps, "jobs/op")
}

func BenchmarkCreatePipelineJobsSerial(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	serial(b, func() error { return e.createChain(ctx, pipelineSteps) })
	b.ReportMetric(pipelineSteps, "jobs/op")
}

// serial is run from one client: op b.N times in turn, reporting ops/s and the
// process's CPU per op.
func serial(b *testing.B, op func() error) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for range b.N {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}
