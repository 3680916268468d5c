package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"golang.org/x/sys/unix"
)

// Fetch checks the commands and downloads the inputs into inputs/. It needs the
// network; a failure is recorded in the state, not returned.
func (r *Runner) Fetch(ctx context.Context, m *mj.Manifest) *State {
	r.defaults(m)
	st := &State{}
	if m.TimeoutSeconds > 0 {
		st.Deadline = time.Now().Add(time.Duration(m.TimeoutSeconds) * time.Second)
	}
	st.Job = ExecManifest(m)
	ctx, cancel := r.deadline(ctx, st)
	defer cancel()
	if r.TicketFile != "" && m.UploadsURL != "" {
		r.fetchTicket(ctx, m, st)
		if st.Failed || st.WorkerFault != "" {
			return st
		}
	}
	if err := r.fetch(ctx, m, st); err != nil {
		st.fail(err)
		fmt.Fprintf(r.Log, "job failed: %s\n", err)
	}
	return st
}

func (r *Runner) fetch(ctx context.Context, m *mj.Manifest, st *State) error {
	for _, d := range []string{"inputs", "outputs"} {
		if err := os.MkdirAll(filepath.Join(r.WorkDir, d), 0o750); err != nil {
			return fmt.Errorf("prepare working directory: %w", err)
		}
	}
	if m.Chunk != nil { // a chunked phase: the user's command, with its own names
		if _, err := r.chunkCommand(m); err != nil {
			return err
		}
	} else if _, err := r.commands(m); err != nil {
		return err
	}
	// Inputs are user URLs: they may not reach private or link-local addresses.
	// The service's own signed files (a temporary file's download_url) come from
	// where the outputs go, whatever its address.
	guard, err := inputGuard(m)
	if err != nil {
		return err
	}
	inputs, own := r.client(guard.Transport()), r.ownClient()
	files := serviceFiles(m.UploadURL)
	names := make([]string, 0, len(m.InputFiles))
	for name := range m.InputFiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		client := inputs
		if isOwnFile(files, m.InputFiles[name]) {
			client = own
		}
		budget, why := inputBudget(m, st.InputBytes)
		n, err := fetch(ctx, client, m.InputFiles[name], filepath.Join(r.WorkDir, "inputs", name), budget, why)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx, m, st, fmt.Sprintf("while fetching input %q", name))
			}
			return fmt.Errorf("input %q could not be fetched from %s: %v", name, mj.ShownURL(m.InputFiles[name]), err)
		}
		st.InputBytes += n
		fmt.Fprintf(r.Log, "fetched input %q: %d bytes\n", name, n)
	}
	return r.linkJobDirs(m)
}

// linkJobDirs lets a list in inputs/ (a concat list, a playlist) name files the
// way commands do: ffmpeg reads `file 'inputs/a.mp4'` in inputs/list.txt as
// inputs/inputs/a.mp4, relative to the list. inputs/inputs is a link to
// inputs/ itself and inputs/outputs one to outputs/ (an earlier command's
// output), unless an input has that name. Both point inside the job, as the
// sandbox sees it on either driver (relative links).
func (r *Runner) linkJobDirs(m *mj.Manifest) error {
	for name, target := range map[string]string{"inputs": ".", "outputs": "../outputs"} {
		if _, taken := m.InputFiles[name]; taken {
			continue
		}
		if err := os.Symlink(target, filepath.Join(r.WorkDir, "inputs", name)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("prepare working directory: %w", err)
		}
	}
	return nil
}

// prepare is command.Prepare; the escape tests swap it to prove the sandbox
// holds for commands the checker would refuse.
var prepare = command.Prepare

// commands splits and checks every command again (the gateway did already):
// nothing the runner executes escapes these rules.
func (r *Runner) commands(m *mj.Manifest) ([][]string, error) {
	// Worker: options and filters the gateway's table does not know (it deferred
	// them) are checked against this worker's own ffmpeg, read once per process.
	spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{}, AllowGPU: r.AllowGPU, Worker: command.WorkerOptions(r.FFmpeg)}
	for name := range m.InputFiles {
		spec.Inputs[name] = true
	}
	for _, name := range m.OutputNames {
		spec.Outputs[name] = true
	}
	argvs := make([][]string, len(m.FFmpegCommands))
	for i, c := range m.FFmpegCommands {
		argv, err := prepare(c, spec)
		if err != nil {
			return nil, fmt.Errorf("command %d: %v", i+1, err)
		}
		argvs[i] = argv
	}
	return argvs, nil
}

// fetch downloads url to path, refusing more than budget bytes (the pool's disk
// left to the job; -1 for no cap) or more than the worker has free.
func fetch(ctx context.Context, client *http.Client, url, path string, budget int64, budgetWhy string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, mj.RedactError(unwrapURLError(err), url)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 { // only the service's own files stop at one
		return 0, fmt.Errorf("HTTP %s: a redirect that is not followed (the service's own files are fetched without redirects; other URLs' redirects need a Location)", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %s", resp.Status)
	}
	// Nomad reserves ephemeral disk for scheduling but does not enforce it: a
	// large input must fail here, not fill the node's disk.
	limit, why := budget, budgetWhy
	if free := freeBytes(filepath.Dir(path)); free >= 0 && (limit < 0 || free-diskReserve < limit) {
		limit, why = max(free-diskReserve, 0), fmt.Sprintf("the %d bytes free on the worker", max(free-diskReserve, 0))
	}
	if limit >= 0 && resp.ContentLength > limit {
		return 0, fmt.Errorf("it is %d bytes, more than %s", resp.ContentLength, why)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	body := io.Reader(resp.Body)
	if limit >= 0 {
		body = io.LimitReader(resp.Body, limit+1)
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && limit >= 0 && n > limit {
		os.Remove(path)
		return n, fmt.Errorf("it is more than %s", why)
	}
	return n, err
}

// diskReserve is kept free for the outputs' metadata, the state and the logs.
const diskReserve = 64 << 20

// freeBytes is the space left to an unprivileged writer of dir, or -1 if unknown.
func freeBytes(dir string) int64 {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return -1
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}

// serviceFiles is the service's "<public_url>/files/" prefix, taken from the
// upload URL (the gateway signs it), or "" if it has none.
func serviceFiles(upload string) string {
	i := strings.Index(upload, "/files/")
	if i < 0 || !strings.HasPrefix(upload, "http") {
		return ""
	}
	return upload[:i+len("/files/")]
}
