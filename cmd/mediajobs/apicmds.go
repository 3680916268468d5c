package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	"github.com/spf13/cobra"
)

// The client commands (run, jobs, upload) talk to a running service through the
// Go client: MEDIAJOBS_URL and MEDIAJOBS_API_KEY, or -url and -api-key; with
// neither, `make run`'s address and the dev key it keeps in .data/dev_api_key.

type apiFlags struct{ url, key string }

func (f *apiFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "url", "", "the service's base URL (default $MEDIAJOBS_URL, else http://$MEDIAJOBS_HTTP_ADDR or http://127.0.0.1:8080)")
	cmd.PersistentFlags().StringVar(&f.key, "api-key", "", "API key (default $MEDIAJOBS_API_KEY, else the dev key in .data/dev_api_key)")
}

// baseURL is the service's: -url, MEDIAJOBS_URL, else make run's address.
func (f *apiFlags) baseURL() string {
	if base := firstOf(f.url, os.Getenv("MEDIAJOBS_URL")); base != "" {
		return base
	}
	return "http://" + firstOf(os.Getenv("MEDIAJOBS_HTTP_ADDR"), "127.0.0.1:8080")
}

func (f *apiFlags) client() (*client.Client, error) {
	base := f.baseURL()
	key := firstOf(f.key, os.Getenv("MEDIAJOBS_API_KEY"))
	if key == "" {
		if b, err := os.ReadFile(filepath.Join(firstOf(os.Getenv("MEDIAJOBS_DATA"), ".data"), "dev_api_key")); err == nil {
			key = strings.TrimSpace(string(b))
		}
	}
	if key == "" {
		return nil, errors.New("no API key: set MEDIAJOBS_API_KEY or -api-key (make run prints one and keeps it in .data/dev_api_key)")
	}
	return client.New(base, key, client.WithUserAgent("mediajobs-cli/"+mj.Version))
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// exitError ends a command with a code (1: the job failed, 130: interrupted) after
// its message was printed.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }

func runCmd(api *apiFlags) *cobra.Command {
	var inputs, outputs []string
	var machine, outDir string
	var timeout time.Duration
	var asJSON, dryRun, parallel, fallback, sceneCuts, quality bool
	var chunkSeconds float64
	var maxWorkers int
	cmd := &cobra.Command{
		Use:   "run -i NAME=FILE|URL ... -o OUTPUT ... [flags] -- FFMPEG ARGS",
		Short: "run one ffmpeg command on the service: upload local inputs, wait with progress, download the outputs",
		Long: `Run one ffmpeg command on the service. Local inputs are uploaded as temporary
files (URLs pass through), the job is created and followed live, and the outputs
are downloaded into -d. The ffmpeg arguments come after --; inputs are
inputs/NAME and outputs outputs/NAME (or {{NAME}}).

Exits 0 when the job succeeded, 1 with ffmpeg's error when it failed, 130 when
interrupted. Ctrl-C asks whether to cancel the job (without a terminal, it is
cancelled). Progress bars on a terminal, plain lines otherwise; -json prints the
final job on stdout.

--dry-run uploads nothing and runs nothing: the service checks the job as a
create would and prints the command as the worker would run it and where; it
exits 0 when the job would be accepted, 1 with the service's error when not.`,
		Example: `  mediajobs run -i video=./in.mp4 -o out.mp4 -- -i inputs/video -vf scale=1280:-2 outputs/out.mp4
  mediajobs run -i v=https://example.com/a.mp4 -o thumb.jpg -d thumbs -- -i {{v}} -frames:v 1 {{thumb.jpg}}`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() < 0 || len(args) == 0 {
				return usageError("give the ffmpeg arguments after --")
			}
			if cmd.ArgsLenAtDash() > 0 {
				return usageError(fmt.Sprintf("%q before --: the ffmpeg arguments all go after --, files to upload in -i NAME=FILE", args[0]))
			}
			if len(outputs) == 0 {
				return usageError("name at least one output with -o")
			}
			c, err := api.client()
			if err != nil {
				return err
			}
			req := client.CreateRequest{
				InputFiles: map[string]string{}, OutputFiles: outputs, Machine: machine,
				FFmpegCommands: []string{shellJoin(args)}, TimeoutSeconds: int(timeout / time.Second),
			}
			if parallel || chunkSeconds > 0 || maxWorkers > 0 || fallback || sceneCuts || quality {
				req.Parallel = &client.Parallel{ChunkSeconds: chunkSeconds, MaxWorkers: maxWorkers, Fallback: fallback, SceneCuts: sceneCuts, Quality: quality}
			}
			local := map[string]string{}
			for _, in := range inputs {
				name, src, ok := strings.Cut(in, "=")
				if !ok || name == "" || src == "" {
					return usageError(fmt.Sprintf("-i %q: want NAME=FILE or NAME=URL", in))
				}
				if u, err := url.Parse(src); err == nil && (u.Scheme == "http" || u.Scheme == "https") || mj.IsJobRef(src) {
					req.InputFiles[name] = src // a URL, or another job's output (job:<id>/<output>)
				} else {
					local[name] = src
				}
			}
			if dryRun {
				return dryRunJob(cmd.Context(), c, req, local, asJSON, cmd.OutOrStdout())
			}
			return runJob(cmd.Context(), c, req, local, outDir, asJSON, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&inputs, "input", "i", nil, "an input: NAME=FILE (uploaded), NAME=URL or NAME=job:<id>/<output> (another job's output); repeat for more")
	f.StringArrayVarP(&outputs, "output", "o", nil, "an output file name the command writes; repeat for more")
	f.StringVar(&machine, "machine", "", `the pool: "cpu" (default) or a GPU pool such as "nvidia"`)
	f.DurationVar(&timeout, "timeout", 0, "the job's timeout (default: the pool's)")
	f.StringVarP(&outDir, "dir", "d", ".", "where the outputs are saved")
	f.BoolVar(&asJSON, "json", false, "print the final job as JSON on stdout (progress goes to stderr)")
	f.BoolVar(&dryRun, "dry-run", false, "check the job without running it: nothing is uploaded or stored")
	f.BoolVar(&parallel, "parallel", false, "encode the video in chunks across workers, stitched and verified (docs/chunked.md); implied by the next four")
	f.Float64Var(&chunkSeconds, "chunk-seconds", 0, "with --parallel: the chunks' length (default: the service's)")
	f.IntVar(&maxWorkers, "max-workers", 0, "with --parallel: how many chunks encode at once (default: the service's)")
	f.BoolVar(&fallback, "fallback", false, "with --parallel: run a command that cannot be split as one job instead of refusing it")
	f.BoolVar(&sceneCuts, "scene-cuts", false, "with --parallel: move each cut to a nearby scene change")
	f.BoolVar(&quality, "quality", false, "with --parallel: also encode in one go and report both encodes' PSNR and SSIM against the source")
	return cmd
}

// dryRunJob asks the service to check req (local files stand in by name: they are
// not uploaded) and prints the commands as the worker would run them.
func dryRunJob(ctx context.Context, c *client.Client, req client.CreateRequest, local map[string]string, asJSON bool, stdout io.Writer) error {
	for name, path := range local {
		if _, err := os.Stat(path); err != nil {
			return err
		}
		req.InputFiles[name] = c.LocalFileURL(name)
	}
	d, err := c.DryRun(ctx, req)
	if err != nil {
		return err
	}
	if asJSON {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(d)
	}
	p := d.Placement
	fmt.Fprintf(stdout, "the job would be accepted: machine %s (Nomad job %s, %s driver, %d MHz, %d MB memory, %d MB disk, %d GPUs), timeout %d s\n",
		p.Machine, p.NomadJob, p.Driver, p.CPUMHz, p.MemoryMB, p.DiskMB, p.GPUs, d.Job.TimeoutSeconds)
	for i, cmd := range d.Commands {
		fmt.Fprintf(stdout, "command %d: %s\n", i+1, shellJoin(cmd.Argv))
	}
	if pr := d.Parallel; pr != nil && pr.Mode == "chunked" {
		fmt.Fprintf(stdout, "in chunks of about %g s, at most %d at once:\n", pr.ChunkSeconds, pr.MaxWorkers)
		for _, s := range pr.Steps {
			fmt.Fprintf(stdout, "  %s: %s\n", s.Name, s.Runs)
		}
		fmt.Fprintf(stdout, "  (%s)\n", pr.Note)
	} else if pr != nil {
		fmt.Fprintf(stdout, "as one job, not in chunks: %s\n", pr.Reason)
	}
	return nil
}

type usageError string

func (e usageError) Error() string { return string(e) }
func (e usageError) ExitCode() int { return 2 }

// runJob uploads the local inputs, creates the job, follows it and downloads its
// outputs.
func runJob(ctx context.Context, c *client.Client, req client.CreateRequest, local map[string]string, outDir string, asJSON bool, stdout, stderr io.Writer) error {
	// Ctrl-C ends ctx (main's signal context); the work goes on under its own
	// context until the user has answered.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	progressOut := stdout
	if asJSON {
		progressOut = stderr
	}
	ui := newProgress(progressOut)
	defer ui.close()

	names := make([]string, 0, len(local))
	for n := range local {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		path := local[name]
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		bar := ui.bytes("upload "+name, fi.Size())
		f, err := c.UploadFile(work, path, bar.set)
		bar.done(err)
		if err != nil {
			return fmt.Errorf("upload %s: %w", path, err)
		}
		req.InputFiles[name] = f.DownloadURL
	}
	if ctx.Err() != nil {
		return &exitError{130, "interrupted before the job was created"}
	}
	job, err := c.Create(work, req)
	if err != nil {
		return err
	}
	ui.line("job %s created", job.ID)
	stage := ui.stage(job.ID)
	type waited struct {
		j   *client.Job
		err error
	}
	done := make(chan waited, 1)
	go func() {
		// A chunked job's events carry its chunks (parallel.steps).
		j, err := c.Wait(work, job.ID, stage.update)
		done <- waited{c.WithChunks(work, j), err}
	}()
	var w waited
	select {
	case w = <-done:
	case <-ctx.Done():
		stage.pause()
		if ui.ask(fmt.Sprintf("cancel job %s? [y/N] ", job.ID)) {
			j, err := c.Cancel(context.Background(), job.ID)
			if err != nil && !(client.IsCode(err, "conflict") && j != nil) {
				return fmt.Errorf("cancel %s: %w", job.ID, err)
			}
			stopWork()
			if j.Status != mj.StatusCancelled { // it ended while we asked
				return &exitError{130, fmt.Sprintf("job %s had already ended: %s", job.ID, j.Status)}
			}
			return &exitError{130, fmt.Sprintf("job %s cancelled", job.ID)}
		}
		stage.resume()
		w = <-done
	}
	stage.finish(w.j)
	if w.err != nil {
		return w.err
	}
	j := w.j
	if j.Status == mj.StatusSucceeded {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
		outs := make([]string, 0, len(j.OutputFiles))
		for n := range j.OutputFiles {
			outs = append(outs, n)
		}
		sort.Strings(outs)
		for _, name := range outs {
			dest := filepath.Join(outDir, filepath.Base(name))
			bar := ui.bytes("download "+name, j.Outputs[name].SizeBytes)
			_, err := c.DownloadFile(work, j.OutputFiles[name], dest, bar.set)
			bar.done(err)
			if err != nil {
				return fmt.Errorf("download %s: %w", name, err)
			}
			ui.line("saved %s", dest)
		}
	}
	ui.close()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(j)
	}
	switch j.Status {
	case mj.StatusSucceeded:
		return nil
	case mj.StatusCancelled:
		return &exitError{1, fmt.Sprintf("job %s was cancelled: %s", j.ID, j.StatusDetail)}
	}
	return &exitError{1, fmt.Sprintf("job %s failed: %s", j.ID, j.ErrorMessage)}
}

// shellJoin quotes args for the service's command splitter (POSIX shell words).
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./{}\[\]-]+$`)

func shellQuote(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func jobsCmd(api *apiFlags) *cobra.Command {
	jobs := &cobra.Command{Use: "jobs", Short: "list, show, follow and cancel jobs, and print their ffmpeg logs"}
	var status string
	var limit, offset int
	var asJSON bool
	list := &cobra.Command{
		Use: "list", Short: "the account's jobs, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			page, err := c.List(cmd.Context(), client.ListOptions{Status: status, Limit: limit, Offset: offset})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), page.Jobs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tCREATED\tMACHINE\tDETAIL")
			for _, j := range page.Jobs {
				detail := j.StatusDetail
				if j.Status == mj.StatusFailed {
					detail = firstLine(j.ErrorMessage)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.ID, j.Status, j.CreatedAt.Local().Format("2006-01-02 15:04:05"), j.Machine, clip(detail, 70))
			}
			tw.Flush()
			morePages(cmd.ErrOrStderr(), len(page.Jobs), page.Total, offset, page.HasMore)
			return nil
		},
	}
	list.Flags().StringVar(&status, "status", "", "only jobs in this status (queued, running, succeeded, failed, cancelled)")
	listFlags(list, &limit, &offset, &asJSON)

	get := getCmd(api, "job", func(ctx context.Context, c *client.Client, id string) (*client.Job, error) { return c.Get(ctx, id) })
	wait := waitCmd(api, "job", func(ctx context.Context, c *client.Client, id string, ui *progressUI) (*client.Job, error) {
		stage := ui.stage(id)
		j, err := c.Wait(ctx, id, stage.update)
		j = c.WithChunks(ctx, j)
		stage.finish(j)
		return j, err
	}, func(j *client.Job) error {
		if j.Status != mj.StatusSucceeded {
			return &exitError{1, fmt.Sprintf("job %s %s: %s", j.ID, j.Status, firstOf(j.ErrorMessage, j.StatusDetail))}
		}
		return nil
	})
	cancel := cancelCmd(api, "job", "cancel a queued or running job",
		func(ctx context.Context, c *client.Client, id string) (*client.Job, error) { return c.Cancel(ctx, id) },
		func(j *client.Job) (string, mj.Status, bool) {
			if j == nil {
				return "", "", false
			}
			return j.ID, j.Status, true
		})
	var command int
	logs := &cobra.Command{
		Use: "logs ID", Short: "print an ended job's full ffmpeg logs (every command, or -command N)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			j, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !j.Status.Terminal() {
				return fmt.Errorf("job %s is %s: its logs come when it ends (mediajobs jobs wait %s)", j.ID, j.Status, j.ID)
			}
			nums := make([]int, 0, len(j.Logs))
			for k := range j.Logs {
				var n int
				fmt.Sscan(k, &n)
				nums = append(nums, n)
			}
			sort.Ints(nums)
			if len(nums) == 0 {
				return fmt.Errorf("job %s has no logs (it ran no command, or ran before logs were kept)", j.ID)
			}
			out := cmd.OutOrStdout()
			if command != 0 && j.Logs[fmt.Sprint(command)] == "" {
				return fmt.Errorf("job %s has no log of command %d (it has %d)", j.ID, command, len(nums))
			}
			for _, n := range nums {
				if command != 0 && n != command {
					continue
				}
				if command == 0 && len(nums) > 1 {
					text := ""
					if n >= 1 && n <= len(j.FFmpegCommands) {
						text = ": ffmpeg " + j.FFmpegCommands[n-1]
					}
					fmt.Fprintf(out, "==> command %d of %d%s\n", n, len(j.FFmpegCommands), text)
				}
				if _, err := c.Download(cmd.Context(), j.Logs[fmt.Sprint(n)], out, nil); err != nil {
					return fmt.Errorf("log of command %d: %w", n, err)
				}
			}
			return nil
		},
	}
	logs.Flags().IntVar(&command, "command", 0, "only this command's log (1-based)")
	jobs.AddCommand(list, get, wait, cancel, logs)
	return jobs
}

func uploadCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use: "upload FILE", Short: "upload a local file as a temporary file and print its download URL (a job input)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			fi, err := os.Stat(args[0])
			if err != nil {
				return err
			}
			ui := newProgress(cmd.ErrOrStderr())
			bar := ui.bytes("upload "+filepath.Base(args[0]), fi.Size())
			f, err := c.UploadFile(cmd.Context(), args[0], bar.set)
			bar.done(err)
			ui.close()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), f.DownloadURL)
			return nil
		},
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func clip(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// readLine reads one line from r (the answer to a question).
func readLine(r io.Reader) string {
	s, _ := bufio.NewReader(r).ReadString('\n')
	return strings.TrimSpace(s)
}
