package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// `mediajobs pipeline`: run, follow, list and cancel pipelines
// (docs/pipelines.md) through the Go client.

func pipelineCmd(api *apiFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "pipeline", Short: "run a pipeline of jobs from a JSON file; show, follow, list and cancel pipelines"}
	var outDir string
	var only []string
	var asJSON, dryRun bool
	run := &cobra.Command{
		Use:   "run FILE",
		Short: "run a pipeline: upload local inputs, follow each step with progress, download the outputs",
		Long: `Run a pipeline: FILE is its JSON document, the body of POST /api/pipelines
(docs/pipelines.md), or - for stdin. An input_files value that is not a URL,
a job:<id>/<output> or a step:<step>/<output> reference is a local file: it is
uploaded first as a temporary file (once, however many steps name it). A
relative path is taken from FILE's directory.

The pipeline is created and followed: a bar per step once it runs (its jobs'
progress together), plain lines off a terminal. With -d, the outputs of every
job that succeeded are saved into DIR/<step>/<name> (DIR/<step>/<item>/<name>
when items of a step write the same name); -step keeps only some steps'.

Exits 0 when the pipeline succeeded, 1 when it failed or was cancelled (the
first failed step's error), 130 when interrupted: Ctrl-C asks whether to cancel
the pipeline (without a terminal, it is cancelled). -json prints the final
pipeline on stdout. --dry-run uploads and stores nothing and prints every job
the pipeline would make.`,
		Example: `  mediajobs pipeline run ladder.json -d out
  mediajobs pipeline run ladder.json -d out -step hls -step thumbs
  mediajobs pipeline run --dry-run ladder.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			req, local, err := readPipeline(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			for _, s := range only {
				if _, ok := req.Steps[s]; !ok {
					return usageError(fmt.Sprintf("-step %s: the pipeline has no such step", s))
				}
			}
			if dryRun {
				return dryRunPipeline(cmd.Context(), c, req, local, asJSON, cmd.OutOrStdout())
			}
			return runPipeline(cmd.Context(), c, req, local, pipelineOut{dir: outDir, only: only, json: asJSON}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := run.Flags()
	f.StringVarP(&outDir, "dir", "d", "", "save the outputs of the jobs that succeeded into this directory (default: none saved)")
	f.StringArrayVar(&only, "step", nil, "with -d: save only this step's outputs; repeat for more")
	f.BoolVar(&asJSON, "json", false, "print the final pipeline as JSON on stdout (progress goes to stderr)")
	f.BoolVar(&dryRun, "dry-run", false, "check the pipeline without running it: nothing is uploaded or stored")

	get := getCmd(api, "pipeline", func(ctx context.Context, c *client.Client, id string) (*client.Pipeline, error) {
		return c.Pipeline(ctx, id)
	})
	wait := waitCmd(api, "pipeline", func(ctx context.Context, c *client.Client, id string, ui *progressUI) (*client.Pipeline, error) {
		steps := newStepBars(ui)
		p, err := c.WaitPipeline(ctx, id, &client.PipelineOptions{OnStep: steps.update})
		steps.finish()
		return p, err
	}, pipelineEnded)
	var limit, offset int
	var listJSON bool
	list := &cobra.Command{
		Use: "list", Short: "the account's pipelines, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			page, err := c.ListPipelines(cmd.Context(), client.PipelineListOptions{Limit: limit, Offset: offset})
			if err != nil {
				return err
			}
			if listJSON {
				return printJSON(cmd.OutOrStdout(), page.Pipelines)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tCREATED\tSTEPS\tJOBS\tDETAIL")
			for _, p := range page.Pipelines {
				jobs, ended := 0, 0
				for _, s := range p.Steps {
					for _, j := range s.Jobs {
						jobs++
						if j.Status.Terminal() || j.Status == mj.StatusDeleted {
							ended++
						}
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%d\t%s\n", p.ID, p.Status, p.CreatedAt.Local().Format("2006-01-02 15:04:05"),
					len(p.Steps), ended, jobs, clip(firstLine(p.ErrorMessage), 70))
			}
			tw.Flush()
			morePages(cmd.ErrOrStderr(), len(page.Pipelines), page.Total, offset, page.HasMore)
			return nil
		},
	}
	listFlags(list, &limit, &offset, &listJSON)
	cancel := cancelCmd(api, "pipeline", "cancel every job of a pipeline that has not ended",
		func(ctx context.Context, c *client.Client, id string) (*client.Pipeline, error) {
			return c.CancelPipeline(ctx, id)
		},
		func(p *client.Pipeline) (string, mj.Status, bool) {
			if p == nil {
				return "", "", false
			}
			return p.ID, p.Status, true
		})
	cmd.AddCommand(run, get, wait, list, cancel)
	return cmd
}

// localInput is an input of a step that names a local file.
type localInput struct{ step, input, path string }

// readPipeline reads a pipeline document (path, or "-" for in) and lists its
// inputs that are local files, their paths made absolute from the document's
// directory.
func readPipeline(path string, in io.Reader) (client.PipelineRequest, []localInput, error) {
	var req client.PipelineRequest
	var b []byte
	var err error
	dir := "."
	if path == "-" {
		b, err = io.ReadAll(in)
	} else {
		b, err = os.ReadFile(path)
		dir = filepath.Dir(path)
	}
	if err != nil {
		return req, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a misspelt field is named here, not dropped
	if err := dec.Decode(&req); err != nil {
		return req, nil, fmt.Errorf("%s: not a pipeline document (JSON, the body of POST /api/pipelines): %w", path, err)
	}
	if len(req.Steps) == 0 {
		return req, nil, fmt.Errorf(`%s: no steps: a pipeline is {"steps": {"name": {a job body}, ...}}`, path)
	}
	var local []localInput
	for _, step := range sortedNames(req.Steps) {
		for _, name := range sortedNames(req.Steps[step].InputFiles) {
			v := req.Steps[step].InputFiles[name]
			if u, err := url.Parse(v); err == nil && (u.Scheme == "http" || u.Scheme == "https") || mj.IsJobRef(v) || strings.HasPrefix(v, "step:") {
				continue
			}
			if strings.Contains(v, "${") {
				return req, nil, fmt.Errorf("steps.%s.input_files.%s: %q: a local file cannot take placeholders (only URLs do); name one file per input", step, name, v)
			}
			p := v
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			fi, err := os.Stat(p)
			if err != nil {
				return req, nil, fmt.Errorf("steps.%s.input_files.%s: %w (not a URL, a job: or a step: reference, so a local file)", step, name, err)
			}
			if !fi.Mode().IsRegular() {
				return req, nil, fmt.Errorf("steps.%s.input_files.%s: %s is not a regular file", step, name, p)
			}
			local = append(local, localInput{step, name, p})
		}
	}
	return req, local, nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// setInput sets one input of a step (Steps holds values, not pointers).
func setInput(req *client.PipelineRequest, step, input, v string) {
	s := req.Steps[step]
	in := make(map[string]string, len(s.InputFiles))
	for k, x := range s.InputFiles {
		in[k] = x
	}
	in[input] = v
	s.InputFiles = in
	req.Steps[step] = s
}

// dryRunPipeline asks the service to check req (local files stand in by name:
// they are not uploaded) and prints every job it would make.
func dryRunPipeline(ctx context.Context, c *client.Client, req client.PipelineRequest, local []localInput, asJSON bool, stdout io.Writer) error {
	for _, l := range local {
		setInput(&req, l.step, l.input, c.LocalFileURL(filepath.Base(l.path)))
	}
	d, err := c.DryRunPipeline(ctx, req)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, d)
	}
	n := 0
	for _, s := range d.Pipeline.Steps {
		n += len(s.Jobs)
	}
	fmt.Fprintf(stdout, "the pipeline would be accepted: %d steps, %d jobs\n", len(d.Pipeline.Steps), n)
	for _, s := range d.Pipeline.Steps {
		after := ""
		if len(s.Needs) > 0 {
			after = " (after " + strings.Join(s.Needs, ", ") + ")"
		}
		fmt.Fprintf(stdout, "step %s%s:\n", s.Name, after)
		for i, j := range d.Jobs[s.Name] {
			label := "  "
			if len(d.Jobs[s.Name]) > 1 {
				label = fmt.Sprintf("  [%d] ", i)
			}
			for _, name := range sortedNames(j.InputFiles) {
				fmt.Fprintf(stdout, "%sinput %s: %s\n", label, name, j.InputFiles[name])
			}
			for _, cmd := range j.FFmpegCommands {
				fmt.Fprintf(stdout, "%sffmpeg %s\n", label, cmd)
			}
		}
	}
	return nil
}

// pipelineOut says what runPipeline does once the pipeline ended.
type pipelineOut struct {
	dir  string   // save outputs here ("": none)
	only []string // of these steps only (none: all)
	json bool     // print the pipeline on stdout
}

// runPipeline uploads the local inputs, creates the pipeline, follows it and
// downloads its outputs.
func runPipeline(ctx context.Context, c *client.Client, req client.PipelineRequest, local []localInput, o pipelineOut, stdout, stderr io.Writer) error {
	// Ctrl-C ends ctx (main's signal context); the work goes on under its own
	// context until the user has answered.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	progressOut := stdout
	if o.json {
		progressOut = stderr
	}
	ui := newProgress(progressOut)
	defer ui.close()

	uploaded := map[string]string{} // path -> download URL
	for _, l := range local {
		if link, ok := uploaded[l.path]; ok {
			setInput(&req, l.step, l.input, link)
			continue
		}
		fi, err := os.Stat(l.path)
		if err != nil {
			return err
		}
		bar := ui.bytes("upload "+filepath.Base(l.path), fi.Size())
		f, err := c.UploadFile(work, l.path, bar.set)
		bar.done(err)
		if err != nil {
			return fmt.Errorf("upload %s: %w", l.path, err)
		}
		uploaded[l.path] = f.DownloadURL
		setInput(&req, l.step, l.input, f.DownloadURL)
		if ctx.Err() != nil {
			return &exitError{130, "interrupted before the pipeline was created"}
		}
	}
	if ctx.Err() != nil {
		return &exitError{130, "interrupted before the pipeline was created"}
	}
	p, err := c.CreatePipeline(work, req)
	if err != nil {
		return err
	}
	jobs := 0
	for _, s := range p.Steps {
		jobs += len(s.Jobs)
	}
	ui.line("pipeline %s created: %d steps, %d jobs", p.ID, len(p.Steps), jobs)
	steps := newStepBars(ui)
	type waited struct {
		p   *client.Pipeline
		err error
	}
	done := make(chan waited, 1)
	go func() {
		p, err := c.WaitPipeline(work, p.ID, &client.PipelineOptions{OnStep: steps.update})
		done <- waited{p, err}
	}()
	var w waited
	select {
	case w = <-done:
	case <-ctx.Done():
		steps.pause()
		if ui.ask(fmt.Sprintf("cancel pipeline %s? [y/N] ", p.ID)) {
			cp, err := c.CancelPipeline(context.Background(), p.ID)
			if err != nil && !(client.IsCode(err, "conflict") && cp != nil) {
				return fmt.Errorf("cancel %s: %w", p.ID, err)
			}
			stopWork()
			if cp.Status.Terminal() && cp.Status != mj.StatusCancelled { // it ended while we asked
				return &exitError{130, fmt.Sprintf("pipeline %s had already ended: %s", p.ID, cp.Status)}
			}
			return &exitError{130, fmt.Sprintf("pipeline %s cancelled", p.ID)}
		}
		steps.resume()
		w = <-done
	}
	steps.finish()
	if w.err != nil {
		return w.err
	}
	p = w.p
	if o.dir != "" {
		if err := downloadPipeline(work, c, ui, p, o); err != nil {
			return err
		}
	}
	ui.close()
	if o.json {
		printJSON(stdout, p)
	}
	return pipelineEnded(p)
}

// pipelineEnded is the command's outcome: nil when p succeeded.
func pipelineEnded(p *client.Pipeline) error {
	switch p.Status {
	case mj.StatusSucceeded:
		return nil
	case mj.StatusCancelled:
		return &exitError{1, fmt.Sprintf("pipeline %s was cancelled: %s", p.ID, firstOf(p.ErrorMessage, "cancelled"))}
	}
	return &exitError{1, fmt.Sprintf("pipeline %s %s: %s", p.ID, p.Status, p.ErrorMessage)}
}

// downloadPipeline saves the outputs of p's succeeded jobs into
// o.dir/<step>/<name>, or o.dir/<step>/<item>/<name> for a step whose items
// write the same name.
func downloadPipeline(ctx context.Context, c *client.Client, ui *progressUI, p *client.Pipeline, o pipelineOut) error {
	for _, s := range p.Steps {
		if len(o.only) > 0 && !contains(o.only, s.Name) {
			continue
		}
		byItem := false
		names := map[string]bool{}
		for _, j := range s.Jobs {
			for name := range j.OutputFiles {
				byItem = byItem || names[name]
				names[name] = true
			}
		}
		for i, j := range s.Jobs {
			if j.Status != mj.StatusSucceeded {
				continue
			}
			dir := filepath.Join(o.dir, s.Name)
			label := s.Name
			if byItem {
				dir = filepath.Join(dir, fmt.Sprint(i))
				label = fmt.Sprintf("%s[%d]", s.Name, i)
			}
			for _, name := range sortedNames(j.OutputFiles) {
				rel := filepath.FromSlash(name)
				if !filepath.IsLocal(rel) {
					return fmt.Errorf("step %s: output %q is not a relative name", label, name)
				}
				dest := filepath.Join(dir, rel)
				if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
					return err
				}
				bar := ui.bytes("download "+label+"/"+name, -1)
				_, err := c.DownloadFile(ctx, j.OutputFiles[name], dest, bar.set)
				bar.done(err)
				if err != nil {
					return fmt.Errorf("download %s/%s: %w", label, name, err)
				}
				ui.line("saved %s", dest)
			}
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// stepBars shows each step of a pipeline: a bar per step once it runs (its
// jobs' progress together) on a terminal, a line per change elsewhere.
type stepBars struct {
	ui     *progressUI
	mu     sync.Mutex
	bars   map[string]*stepBar
	paused bool
}

type stepBar struct {
	bar      *mpb.Bar
	mu       sync.Mutex // msg, which the bar's decorator reads
	msg      string
	lastLine string
	lastAt   time.Time
	ended    bool
}

func newStepBars(ui *progressUI) *stepBars {
	return &stepBars{ui: ui, bars: map[string]*stepBar{}}
}

// describeStep is one line of where a step stands, and its percent.
func describeStep(s *client.PipelineStep) (string, float64) {
	n, ended, running := len(s.Jobs), 0, 0
	pct := 0.0
	var failed *mj.StepJob
	for i := range s.Jobs {
		j := &s.Jobs[i]
		switch {
		case j.Status.Terminal() || j.Status == mj.StatusDeleted: // deleted: ended long ago (retention)
			ended++
			pct += 100
			if j.Status == mj.StatusFailed && failed == nil {
				failed = j
			}
		case j.Status == mj.StatusRunning:
			running++
			if j.Progress != nil && j.Progress.Percent != nil {
				pct += *j.Progress.Percent
			}
		}
	}
	if n > 0 {
		pct /= float64(n)
	}
	jobs := ""
	if n > 1 {
		jobs = fmt.Sprintf(" (%d jobs)", n)
	}
	switch s.Status {
	case mj.StatusQueued:
		if len(s.Needs) > 0 && ended == 0 {
			return "queued: waiting for step " + strings.Join(s.Needs, ", "), 0
		}
		detail := "waiting for a worker"
		if n > 0 && s.Jobs[0].StatusDetail != "" {
			detail = s.Jobs[0].StatusDetail
		}
		return "queued: " + detail, pct
	case mj.StatusRunning:
		if n == 1 {
			if msg, p := describe(&client.Job{Status: s.Jobs[0].Status, StatusDetail: s.Jobs[0].StatusDetail, Progress: s.Jobs[0].Progress}); s.Jobs[0].Status == mj.StatusRunning {
				return msg, p
			}
		}
		return fmt.Sprintf("running: %d of %d jobs ended, %d running", ended, n, running), pct
	case mj.StatusSucceeded:
		msg := "succeeded" + jobs
		if s.DurationSeconds != nil {
			msg += fmt.Sprintf(" in %s", (time.Duration(*s.DurationSeconds*10) * time.Second / 10).String())
		}
		return msg, 100
	case mj.StatusFailed:
		if failed != nil {
			return "failed: " + firstLine(failed.ErrorMessage), pct
		}
	}
	return string(s.Status) + jobs, pct
}

// update shows step s as it now stands (client.PipelineOptions.OnStep).
func (b *stepBars) update(_ *client.Pipeline, s *client.PipelineStep) {
	msg, pct := describeStep(s)
	b.mu.Lock()
	defer b.mu.Unlock()
	sb := b.bars[s.Name]
	if sb == nil {
		sb = &stepBar{}
		b.bars[s.Name] = sb
	}
	if sb.ended {
		return
	}
	ended := s.Status.Terminal()
	if b.ui.p != nil {
		// A bar from the step's start: the queued ones would only say what
		// they wait for.
		if sb.bar == nil && s.Status == mj.StatusQueued {
			return
		}
		if sb.bar == nil {
			sb.bar = b.ui.add(b.ui.p.AddBar(100,
				mpb.PrependDecorators(decor.Name("step "+s.Name, decor.WCSyncSpaceR)),
				mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Any(func(decor.Statistics) string {
					sb.mu.Lock()
					defer sb.mu.Unlock()
					return " " + sb.msg
				}))))
		}
		// Not under b.mu alone: the decorator runs in the bar's goroutine,
		// which the calls below wait for.
		sb.mu.Lock()
		sb.msg = msg
		sb.mu.Unlock()
		switch {
		case s.Status == mj.StatusSucceeded:
			sb.bar.SetTotal(-1, true)
		case ended:
			sb.bar.Abort(false)
		default:
			sb.bar.SetCurrent(int64(pct))
		}
		sb.ended = ended
		if ended && s.Status != mj.StatusSucceeded {
			b.ui.line("step %s %s", s.Name, msg)
		}
		return
	}
	if b.paused || msg == sb.lastLine {
		return
	}
	// A new status at once; progress at most every 2 s.
	if ended || !strings.HasPrefix(msg, "running") || !strings.HasPrefix(sb.lastLine, "running") || time.Since(sb.lastAt) >= 2*time.Second {
		b.ui.line("step %s %s", s.Name, msg)
		sb.lastLine, sb.lastAt, sb.ended = msg, time.Now(), ended
	}
}

func (b *stepBars) pause()  { b.mu.Lock(); b.paused = true; b.mu.Unlock() }
func (b *stepBars) resume() { b.mu.Lock(); b.paused = false; b.mu.Unlock() }

// finish drops the bars of steps that did not end (an interrupted wait).
func (b *stepBars) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, sb := range b.bars {
		if sb.bar != nil && !sb.ended {
			sb.bar.Abort(false)
			sb.ended = true
		}
	}
}
