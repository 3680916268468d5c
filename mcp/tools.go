package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type jobInput struct {
	InputFiles     map[string]string `json:"input_files,omitempty" jsonschema:"input name -> http(s) URL, job:<job id>/<output name> (another job's output: the job waits for it), or, over stdio, a local file path; refer to it in commands as {{name}}"`
	OutputFiles    []string          `json:"output_files" jsonschema:"every file the commands write as a result, e.g. [\"out.mp4\"]; [] for an analysis that writes none"`
	FFmpegCommands []string          `json:"ffmpeg_commands" jsonschema:"ffmpeg arguments without the leading ffmpeg, one string per command, run in order"`
	Machine        string            `json:"machine,omitempty" jsonschema:"the worker pool: cpu (default) or a GPU pool such as nvidia"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"the job's time limit in seconds (default: the pool's)"`
	Parallel       *parallelInput    `json:"parallel,omitempty" jsonschema:"encode the video in chunks on several workers, stitched and verified (one command, one input, one output; e.g. {\"chunk_seconds\": 60, \"max_workers\": 8}); a command that cannot be split is refused naming why, unless fallback"`
}

type runJobInput struct {
	jobInput
	WaitSeconds *int   `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the job to end before returning it as it stands (default 120, 0: do not wait)"`
	DownloadDir string `json:"download_dir,omitempty" jsonschema:"over stdio: save the outputs into this local directory once the job succeeded"`
}

type runJobOutput struct {
	Job        *jobResult        `json:"job"`
	Downloaded map[string]string `json:"downloaded,omitempty"`
}

func (t *tools) request(ctx context.Context, in jobInput, upload bool) (client.CreateRequest, error) {
	req := client.CreateRequest{InputFiles: map[string]string{}, OutputFiles: in.OutputFiles, FFmpegCommands: in.FFmpegCommands,
		Machine: in.Machine, TimeoutSeconds: in.TimeoutSeconds, Parallel: in.Parallel.request()}
	if req.OutputFiles == nil {
		req.OutputFiles = []string{}
	}
	r := t.inputs(upload)
	for name, src := range in.InputFiles {
		link, err := r.resolve(ctx, "input_files."+name, name, src, false)
		if err != nil {
			return req, err
		}
		req.InputFiles[name] = link
	}
	return req, nil
}

// inputResolver turns the inputs a tool was given into what the API takes:
// URLs and references pass through; over stdio a local file is uploaded (each
// path once), or, for a dry run (no upload), named by a placeholder URL.
type inputResolver struct {
	t        *tools
	upload   bool
	uploaded map[string]string
}

func (t *tools) inputs(upload bool) *inputResolver {
	return &inputResolver{t: t, upload: upload, uploaded: map[string]string{}}
}

// resolve resolves input name's value src (field names it in errors); steps
// also accept step: references.
func (r *inputResolver) resolve(ctx context.Context, field, name, src string, steps bool) (string, error) {
	if u, err := url.Parse(src); err == nil && (u.Scheme == "http" || u.Scheme == "https") || mj.IsJobRef(src) || steps && strings.HasPrefix(src, "step:") {
		return src, nil // a URL, or another job's (or step's) output
	}
	if !r.t.local {
		refs := "a job: reference"
		if steps {
			refs = "a step: or job: reference"
		}
		return "", fmt.Errorf("%s: %q is not an http(s) URL or %s (this MCP server runs over HTTP and reads no local files)", field, src, refs)
	}
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("%s: %v", field, err)
	}
	if !r.upload {
		if steps {
			name = filepath.Base(src)
		}
		return r.t.c.LocalFileURL(name), nil
	}
	if link, ok := r.uploaded[src]; ok {
		return link, nil
	}
	f, err := r.t.c.UploadFile(ctx, src, nil)
	if err != nil {
		return "", fmt.Errorf("upload %s: %w", src, toolError(err))
	}
	r.uploaded[src] = f.DownloadURL
	return f.DownloadURL, nil
}

func (t *tools) runJob(ctx context.Context, _ *sdk.CallToolRequest, in runJobInput) (*sdk.CallToolResult, any, error) {
	if in.DownloadDir != "" && !t.local {
		return nil, nil, errors.New("download_dir: this MCP server runs over HTTP and writes no local files; download the output_files links instead")
	}
	req, err := t.request(ctx, in.jobInput, true)
	if err != nil {
		return nil, nil, err
	}
	j, err := t.c.Create(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	wait := 120
	if in.WaitSeconds != nil {
		wait = *in.WaitSeconds
	}
	if j, err = t.wait(ctx, j, wait); err != nil {
		return nil, nil, err
	}
	out := runJobOutput{Job: result(j)}
	if in.DownloadDir != "" && j.Status == mj.StatusSucceeded {
		if err := os.MkdirAll(in.DownloadDir, 0o755); err != nil {
			return nil, out, err
		}
		out.Downloaded = map[string]string{}
		for name, link := range j.OutputFiles {
			p := filepath.Join(in.DownloadDir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, out, err
			}
			if _, err := t.c.DownloadFile(ctx, link, p, nil); err != nil {
				return nil, out, fmt.Errorf("download %s: %w", name, toolError(err))
			}
			out.Downloaded[name] = p
		}
	}
	return nil, out, nil
}

// wait follows j for at most seconds; a job still going is returned as it stands.
func (t *tools) wait(ctx context.Context, j *client.Job, seconds int) (*client.Job, error) {
	if seconds <= 0 || j.Status.Terminal() {
		return t.c.WithChunks(ctx, j), nil
	}
	j, err := waitAtMost(ctx, seconds,
		func(ctx context.Context) (*client.Job, error) { return t.c.Wait(ctx, j.ID, nil) },
		func(ctx context.Context) (*client.Job, error) { return t.c.Get(ctx, j.ID) })
	if err != nil {
		return nil, err
	}
	return t.c.WithChunks(ctx, j), nil
}

// waitAtMost follows something until it ends (wait), for at most seconds;
// then reads it as it stands (get).
func waitAtMost[T any](ctx context.Context, seconds int, wait, get func(context.Context) (T, error)) (T, error) {
	wctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	defer cancel()
	ended, err := wait(wctx)
	if err == nil {
		return ended, nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		latest, gerr := get(ctx)
		if gerr != nil {
			var none T
			return none, toolError(gerr)
		}
		return latest, nil
	}
	var none T
	return none, toolError(err)
}

func (t *tools) checkJob(ctx context.Context, _ *sdk.CallToolRequest, in jobInput) (*sdk.CallToolResult, any, error) {
	req, err := t.request(ctx, in, false)
	if err != nil {
		return nil, nil, err
	}
	d, err := t.c.DryRun(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, d, nil
}

type idInput struct {
	ID string `json:"id" jsonschema:"the job's id"`
}

func (t *tools) getJob(ctx context.Context, _ *sdk.CallToolRequest, in idInput) (*sdk.CallToolResult, any, error) {
	j, err := t.c.Get(ctx, in.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, result(j), nil
}

type listInput struct {
	Status string `json:"status,omitempty" jsonschema:"only jobs in this status: queued, running, succeeded, failed or cancelled"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many (1-100, default 20)"`
	Offset int    `json:"offset,omitempty" jsonschema:"skip this many of the newest"`
}

type listOutput struct {
	Jobs    []client.Job `json:"jobs"`
	Total   int          `json:"total"`
	HasMore bool         `json:"has_more"`
}

func (t *tools) listJobs(ctx context.Context, _ *sdk.CallToolRequest, in listInput) (*sdk.CallToolResult, any, error) {
	if in.Limit == 0 {
		in.Limit = 20
	}
	p, err := t.c.List(ctx, client.ListOptions{Status: in.Status, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, listOutput{Jobs: p.Jobs, Total: p.Total, HasMore: p.HasMore}, nil
}

type waitInput struct {
	ID          string `json:"id" jsonschema:"the job's id"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"the longest to wait (default 120)"`
}

func (t *tools) waitJob(ctx context.Context, _ *sdk.CallToolRequest, in waitInput) (*sdk.CallToolResult, any, error) {
	j, err := t.c.Get(ctx, in.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if in.WaitSeconds == 0 {
		in.WaitSeconds = 120
	}
	if j, err = t.wait(ctx, j, in.WaitSeconds); err != nil {
		return nil, nil, err
	}
	return nil, result(j), nil
}

func (t *tools) cancelJob(ctx context.Context, _ *sdk.CallToolRequest, in idInput) (*sdk.CallToolResult, any, error) {
	j, err := t.c.Cancel(ctx, in.ID)
	if err != nil && !(client.IsCode(err, "conflict") && j != nil) { // conflict: it had ended; here it is as it ended
		return nil, nil, toolError(err)
	}
	return nil, j, nil
}

type logsInput struct {
	ID       string `json:"id" jsonschema:"the job's id"`
	Command  int    `json:"command,omitempty" jsonschema:"only this command's log (1-based); default: every command's"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"keep the last this many bytes of each log (default 20000)"`
}

type logsOutput struct {
	Logs []commandLog `json:"logs"`
}

type commandLog struct {
	Command   int    `json:"command"`
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *tools) jobLogs(ctx context.Context, _ *sdk.CallToolRequest, in logsInput) (*sdk.CallToolResult, logsOutput, error) {
	j, err := t.c.Get(ctx, in.ID)
	if err != nil {
		return nil, logsOutput{}, toolError(err)
	}
	if !j.Status.Terminal() {
		return nil, logsOutput{}, fmt.Errorf("job %s is %s: its logs come when it ends (use wait_job)", j.ID, j.Status)
	}
	if in.MaxBytes <= 0 {
		in.MaxBytes = 20000
	}
	var out logsOutput
	for n := 1; n <= len(j.FFmpegCommands); n++ {
		link, ok := j.Logs[fmt.Sprint(n)]
		if !ok || in.Command != 0 && n != in.Command {
			continue
		}
		text, truncated, err := t.fetchTail(ctx, link, in.MaxBytes)
		if err != nil {
			return nil, logsOutput{}, fmt.Errorf("log of command %d: %w", n, err)
		}
		out.Logs = append(out.Logs, commandLog{Command: n, Text: text, Truncated: truncated})
	}
	if len(out.Logs) == 0 {
		return nil, out, fmt.Errorf("job %s has no log of command %d (it has %d commands)", j.ID, in.Command, len(j.FFmpegCommands))
	}
	return nil, out, nil
}

// fetchTail downloads a log, keeping its last max bytes.
func (t *tools) fetchTail(ctx context.Context, link string, max int) (string, bool, error) {
	var buf tailBuffer
	buf.max = max
	if _, err := t.c.Download(ctx, link, &buf, nil); err != nil {
		return "", false, toolError(err)
	}
	return string(buf.b), buf.cut, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	b   []byte
	max int
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b, t.cut = t.b[over:], true
	}
	return len(p), nil
}

type probeInput struct {
	File    string `json:"file" jsonschema:"the media file: an http(s) URL (or, over stdio, a local file path)"`
	Machine string `json:"machine,omitempty" jsonschema:"the worker pool to probe on (default cpu)"`
}

// MediaInfo is what ffmpeg says of an input when it opens it.
type MediaInfo struct {
	Format   string   `json:"format"`
	Duration string   `json:"duration,omitempty"`
	Bitrate  string   `json:"bitrate,omitempty"`
	Streams  []string `json:"streams"`
	// Info is ffmpeg's whole description of the input, metadata included.
	Info string `json:"info"`
}

// probe runs a job that opens the file and writes nothing ("-t 0 -f null -"), and
// reads what ffmpeg printed of the input from the job's log.
func (t *tools) probe(ctx context.Context, _ *sdk.CallToolRequest, in probeInput) (*sdk.CallToolResult, *MediaInfo, error) {
	req, err := t.request(ctx, jobInput{InputFiles: map[string]string{"file": in.File}, OutputFiles: []string{},
		FFmpegCommands: []string{"-i {{file}} -t 0 -f null -"}, Machine: in.Machine}, true)
	if err != nil {
		return nil, nil, err
	}
	j, err := t.c.Create(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if j, err = t.wait(ctx, j, 300); err != nil {
		return nil, nil, err
	}
	if !j.Status.Terminal() {
		return nil, nil, fmt.Errorf("probe job %s is still %s after 300 s; get_job or wait_job it later", j.ID, j.Status)
	}
	link := j.Logs["1"]
	if link == "" {
		return nil, nil, fmt.Errorf("probe job %s %s without a log: %s", j.ID, j.Status, j.ErrorMessage)
	}
	text, _, err := t.fetchTail(ctx, link, 1<<20)
	if err != nil {
		return nil, nil, err
	}
	info := parseInputInfo(text)
	if info == nil {
		return nil, nil, fmt.Errorf("ffmpeg could not read the file (job %s %s): %s", j.ID, j.Status, j.ErrorMessage)
	}
	return nil, info, nil
}

var (
	inputHeadRe = regexp.MustCompile(`^Input #0, (.+), from `)
	durationRe  = regexp.MustCompile(`^\s*Duration: ([^,]+)(?:, start: [^,]+)?(?:, bitrate: (.+))?$`)
	streamRe    = regexp.MustCompile(`^\s*Stream #0:\d+`)
	levelTagRe  = regexp.MustCompile(`^\[[a-z]+\] ?`)
)

// parseInputInfo reads the "Input #0" section of an ffmpeg log (lines tagged with
// their level, -loglevel level+info); nil when there is none.
func parseInputInfo(log string) *MediaInfo {
	var m *MediaInfo
	var info bytes.Buffer
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimRight(levelTagRe.ReplaceAllString(line, ""), "\r")
		if m == nil {
			if s := inputHeadRe.FindStringSubmatch(line); s != nil {
				m = &MediaInfo{Format: s[1], Streams: []string{}}
				info.WriteString(line + "\n")
			}
			continue
		}
		if !strings.HasPrefix(line, " ") { // the section ends ("Stream mapping:", "Output #0")
			break
		}
		info.WriteString(line + "\n")
		if s := durationRe.FindStringSubmatch(line); s != nil {
			m.Duration, m.Bitrate = s[1], s[2]
		} else if streamRe.MatchString(line) {
			m.Streams = append(m.Streams, strings.TrimSpace(line))
		}
	}
	if m != nil {
		m.Info = info.String()
	}
	return m
}
