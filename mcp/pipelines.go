package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The pipeline tools (docs/pipelines.md): run_pipeline, get_pipeline,
// cancel_pipeline.

type stepInput struct {
	InputFiles     map[string]string   `json:"input_files,omitempty" jsonschema:"input name -> an http(s) URL, step:<step>/<output> (another step's output), step:<step>[*]/<output> (that output of every item of a step with for_each: one input per item, name_0, name_1, ...), step:<step>[${index}]/<output> (the item of the same index), job:<job id>/<output>, or, over stdio, a local file path"`
	OutputFiles    []string            `json:"output_files" jsonschema:"every file the step's commands write, e.g. [\"out.mp4\"]; may hold ${item.<key>} and ${index} in a step with for_each"`
	FFmpegCommands []string            `json:"ffmpeg_commands" jsonschema:"ffmpeg arguments without the leading ffmpeg, files as {{name}}; with for_each: ${item.<key>}, ${index}; over a fan-in input r: ${count:r}, ${each:r:TEXT} (TEXT once per item, {{r}} in it naming that item's input)"`
	Machine        string              `json:"machine,omitempty" jsonschema:"the worker pool: cpu (default) or a GPU pool such as nvidia"`
	TimeoutSeconds int                 `json:"timeout_seconds,omitempty" jsonschema:"each job's time limit in seconds (default: the pool's)"`
	ForEach        []map[string]string `json:"for_each,omitempty" jsonschema:"run the step once per item (fan-out), e.g. [{\"height\": \"360\"}, {\"height\": \"720\"}]: ${item.height} in its commands, output names and URL inputs takes each item's value"`
	Publish        *bool               `json:"publish,omitempty" jsonschema:"false: the step's outputs are only for the steps after it (no download links; deleted when the pipeline ends); default true"`
}

type runPipelineInput struct {
	Steps       map[string]stepInput `json:"steps" jsonschema:"the steps by name ([A-Za-z0-9][A-Za-z0-9_-]*): each a job body, plus for_each"`
	FailFast    bool                 `json:"fail_fast,omitempty" jsonschema:"cancel every job not ended at the first one that fails (default: independent steps run on)"`
	DryRun      bool                 `json:"dry_run,omitempty" jsonschema:"check the whole pipeline and return every job it would make, running and storing nothing (local files are not uploaded)"`
	WaitSeconds *int                 `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the pipeline to end before returning it as it stands (default 120, 0: do not wait)"`
	DownloadDir string               `json:"download_dir,omitempty" jsonschema:"over stdio: save the outputs of every job that succeeded into this local directory, as <dir>/<step>/<name> (<dir>/<step>/<item>/<name> when items write the same name)"`
}

type pipelineOutput struct {
	Pipeline   *client.Pipeline       `json:"pipeline,omitempty"`
	DryRun     *client.PipelineDryRun `json:"dry_run,omitempty"`
	Downloaded map[string]string      `json:"downloaded,omitempty"`
}

const pipelineExample = `Example, an HLS ladder: one source, two renditions in parallel, a master playlist over both, a thumbnail beside:
{"steps": {
  "rung": {"input_files": {"src": "https://example.com/talk.mp4"}, "output_files": ["r${item.height}.mp4"],
           "ffmpeg_commands": ["-i {{src}} -vf scale=-2:${item.height} -c:v libx264 -b:v ${item.bitrate} -c:a aac {{r${item.height}.mp4}}"],
           "for_each": [{"height": "360", "bitrate": "800k"}, {"height": "720", "bitrate": "2800k"}]},
  "hls": {"input_files": {"r": "step:rung[*]/r${item.height}.mp4"}, "output_files": ["master.m3u8", "v%v/index.m3u8", "v%v/seg_%03d.ts"],
          "ffmpeg_commands": ["${each:r:-i {{r}}} ${each:r:-map ${index}:v -map ${index}:a} -c copy -f hls -hls_playlist_type vod -var_stream_map \"${each:r:v:${index},a:${index}}\" -master_pl_name master.m3u8 -hls_segment_filename {{v%v/seg_%03d.ts}} {{v%v/index.m3u8}}"]},
  "thumbs": {"input_files": {"src": "https://example.com/talk.mp4"}, "output_files": ["strip.jpg"],
             "ffmpeg_commands": ["-i {{src}} -vf fps=1/10,scale=160:-2,tile=10x1 -frames:v 1 {{strip.jpg}}"]}}}`

// pipelineRequest turns in into the API's document: URLs and references pass,
// local files (stdio only) are uploaded, once each, when upload is set, else
// named as a dry run names them.
func (t *tools) pipelineRequest(ctx context.Context, in runPipelineInput, upload bool) (client.PipelineRequest, error) {
	req := client.PipelineRequest{Steps: map[string]client.Step{}, FailFast: in.FailFast}
	r := t.inputs(upload)
	names := make([]string, 0, len(in.Steps))
	for n := range in.Steps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := in.Steps[name]
		step := client.Step{ForEach: s.ForEach, Publish: s.Publish, CreateRequest: client.CreateRequest{InputFiles: map[string]string{},
			OutputFiles: s.OutputFiles, FFmpegCommands: s.FFmpegCommands, Machine: s.Machine, TimeoutSeconds: s.TimeoutSeconds}}
		for input, src := range s.InputFiles {
			link, err := r.resolve(ctx, "steps."+name+".input_files."+input, input, src, true)
			if err != nil {
				return req, err
			}
			step.InputFiles[input] = link
		}
		req.Steps[name] = step
	}
	return req, nil
}

func (t *tools) runPipeline(ctx context.Context, _ *sdk.CallToolRequest, in runPipelineInput) (*sdk.CallToolResult, any, error) {
	if in.DownloadDir != "" && !t.local {
		return nil, nil, errors.New("download_dir: this MCP server runs over HTTP and writes no local files; download the output_files links instead")
	}
	req, err := t.pipelineRequest(ctx, in, !in.DryRun)
	if err != nil {
		return nil, nil, err
	}
	if in.DryRun {
		d, err := t.c.DryRunPipeline(ctx, req)
		if err != nil {
			return nil, nil, toolError(err)
		}
		return nil, pipelineOutput{DryRun: d}, nil
	}
	p, err := t.c.CreatePipeline(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	wait := 120
	if in.WaitSeconds != nil {
		wait = *in.WaitSeconds
	}
	if p, err = t.waitPipeline(ctx, p, wait); err != nil {
		return nil, nil, err
	}
	out := pipelineOutput{Pipeline: p}
	if in.DownloadDir != "" {
		if out.Downloaded, err = t.downloadPipeline(ctx, p, in.DownloadDir); err != nil {
			return nil, out, err
		}
	}
	return nil, out, nil
}

// waitPipeline follows p for at most seconds; one still going is returned as
// it stands.
func (t *tools) waitPipeline(ctx context.Context, p *client.Pipeline, seconds int) (*client.Pipeline, error) {
	if seconds <= 0 || p.Status.Terminal() {
		return p, nil
	}
	return waitAtMost(ctx, seconds,
		func(ctx context.Context) (*client.Pipeline, error) { return t.c.WaitPipeline(ctx, p.ID, nil) },
		func(ctx context.Context) (*client.Pipeline, error) { return t.c.Pipeline(ctx, p.ID) })
}

// downloadPipeline saves the outputs of p's succeeded jobs under dir.
func (t *tools) downloadPipeline(ctx context.Context, p *client.Pipeline, dir string) (map[string]string, error) {
	got := map[string]string{}
	for _, s := range p.Steps {
		seen, byItem := map[string]bool{}, false
		for _, j := range s.Jobs {
			for name := range j.OutputFiles {
				byItem = byItem || seen[name]
				seen[name] = true
			}
		}
		for i, j := range s.Jobs {
			if j.Status != mj.StatusSucceeded {
				continue
			}
			base, label := filepath.Join(dir, s.Name), s.Name
			if byItem {
				base, label = filepath.Join(base, fmt.Sprint(i)), fmt.Sprintf("%s[%d]", s.Name, i)
			}
			for name, link := range j.OutputFiles {
				rel := filepath.FromSlash(name)
				if !filepath.IsLocal(rel) {
					return got, fmt.Errorf("step %s: output %q is not a relative name", label, name)
				}
				dest := filepath.Join(base, rel)
				if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
					return got, err
				}
				if _, err := t.c.DownloadFile(ctx, link, dest, nil); err != nil {
					return got, fmt.Errorf("download %s/%s: %w", label, name, toolError(err))
				}
				got[label+"/"+name] = dest
			}
		}
	}
	return got, nil
}

type pipelineIDInput struct {
	ID          string `json:"id" jsonschema:"the pipeline's id"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this long for it to end (default 0: return it as it stands)"`
}

func (t *tools) getPipeline(ctx context.Context, _ *sdk.CallToolRequest, in pipelineIDInput) (*sdk.CallToolResult, any, error) {
	p, err := t.c.Pipeline(ctx, in.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if p, err = t.waitPipeline(ctx, p, in.WaitSeconds); err != nil {
		return nil, nil, err
	}
	return nil, p, nil
}

type cancelPipelineInput struct {
	ID string `json:"id" jsonschema:"the pipeline's id"`
}

func (t *tools) cancelPipeline(ctx context.Context, _ *sdk.CallToolRequest, in cancelPipelineInput) (*sdk.CallToolResult, any, error) {
	p, err := t.c.CancelPipeline(ctx, in.ID)
	if err != nil && !(client.IsCode(err, "conflict") && p != nil) { // it had ended: here it is as it ended
		return nil, nil, toolError(err)
	}
	return nil, p, nil
}

// addPipelineTools adds the pipeline tools to s.
func addPipelineTools(s *sdk.Server, t *tools, inputs string) {
	sdk.AddTool(s, &sdk.Tool{Name: "run_pipeline", Title: "Run a pipeline of ffmpeg jobs",
		Description: "Run several ffmpeg jobs as one graph and wait for the result: named steps, each a job body as run_job takes it, " +
			"whose inputs may name other steps' outputs (step:<step>/<output>). A step with for_each runs once per item in parallel (fan-out); " +
			"an input step:<step>[*]/<output> takes every item's output (fan-in). A step starts when every output it takes exists; " +
			"a failed step fails the steps that take its outputs, independent ones run on (fail_fast stops all). " + inputs + ", or a step: reference.\n" +
			commandRules + "\n" + pipelineExample +
			"\nReturns the pipeline: status, error_message (naming the first failed step), and each step's status, duration and jobs, " +
			"each job with its status, error_message and output_files (signed download links). The whole document is checked before anything runs: " +
			"a refused pipeline returns every problem, named steps.<step>.<field>; fix them and call again. dry_run shows every job it would make."},
		t.runPipeline)
	sdk.AddTool(s, &sdk.Tool{Name: "get_pipeline", Title: "Get a pipeline",
		Description: "Get a pipeline by id: its status and each step's status, timings and jobs with their output links; wait_seconds waits for it to end first.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.getPipeline)
	sdk.AddTool(s, &sdk.Tool{Name: "cancel_pipeline", Title: "Cancel a pipeline",
		Description: "Cancel every job of a pipeline that has not ended; returns the pipeline. One that already ended is returned as it ended.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}}, t.cancelPipeline)
}
