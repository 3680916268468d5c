package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/sys/unix"
)

// Upload sends the outputs and the result. It needs the network (to the gateway).
func (r *Runner) Upload(ctx context.Context, m *mj.Manifest, st *State) (*mj.Result, error) {
	r.defaults(m)
	if st.WorkerFault != "" {
		return nil, fmt.Errorf("%s; no result is reported, so the job is retried", st.WorkerFault)
	}
	if st.Stopped {
		return nil, ErrStopped
	}
	client := r.client(nil)
	// The service's own storage (outputs, the result) is waited for longer: an
	// object store restarting is no fault of the job's.
	store := r.patient()
	uctx, cancel := r.deadline(ctx, st)
	defer cancel()
	// Past the deadline, what is left (links, logs, the result) ends within
	// ReportSeconds: the dispatcher's backstop looks for the result then.
	ctx, rcancel := reportContext(ctx, m, st)
	defer rcancel()
	alloc := r.allocPrefix()
	if !st.Failed && !st.Done {
		// The exec task ended without saving its state: killed outright (most
		// often the pool's memory limit), or it never started.
		st.fail(fmt.Errorf("the commands did not run to the end: the worker was killed (for example for going over the pool's memory limit) or could not start"))
	}
	if !st.Failed {
		if err := mj.CheckOutputs(st.Outputs, m.OutputNames, m.MaxOutputFiles); err != nil {
			st.fail(err) // the state was written where ffmpeg could write too
		}
	}
	var root *os.Root
	if !st.Failed {
		// Through an os.Root: no link ffmpeg made leads the upload out of the job.
		var err error
		if root, err = os.OpenRoot(r.WorkDir); err != nil {
			st.fail(fmt.Errorf("read outputs: %w", err))
		} else {
			defer root.Close()
		}
	}
	// Asked for with ctx, not the job's deadline: the result goes up even after a
	// timeout, to say so.
	logs := r.presentLogs(m)
	dest, dests, err := r.uploadLinks(ctx, r.patient(), m, st, logs, alloc)
	var refused *linksRefused
	if err != nil && !st.Failed && errors.As(err, &refused) {
		// The outputs cannot go up (a name the gateway refuses, a limit of its):
		// the job fails, and says why, if the result alone can still be reported.
		// A gateway that stayed unreachable is no refusal: nothing is reported, and
		// the dispatcher runs the attempt again.
		fmt.Fprintf(r.Log, "upload links: %v\n", err)
		st.fail(fmt.Errorf("could not upload the outputs: %w", err))
		dest, dests, err = r.uploadLinks(ctx, r.patient(), m, st, logs, alloc)
	}
	if err != nil {
		return nil, fmt.Errorf("report result: %w", err)
	}
	if !st.Failed {
		for i := range st.Outputs {
			o := &st.Outputs[i]
			fh, err := openOutput(root, o.Name)
			if err == nil {
				// The size sent is the file's, not the one the state claims.
				if fi, serr := fh.Stat(); serr != nil || !fi.Mode().IsRegular() {
					fh.Close()
					err = fmt.Errorf("not a regular file")
				} else {
					o.Size = fi.Size()
				}
			}
			if err == nil {
				err = r.deliver(uctx, m, store, fh, o, dest, dests)
				fh.Close()
			}
			var se *storeError
			if err != nil && uctx.Err() == nil && errors.As(err, &se) {
				// Not the job's failure: nothing is reported, and the
				// dispatcher runs the attempt again.
				return nil, fmt.Errorf("the service's storage did not take output %s: %w; no result is reported, so the job is retried", o.Name, se.err)
			}
			if err != nil {
				if uctx.Err() != nil {
					err = timeoutError(m, "while uploading outputs")
				} else {
					err = fmt.Errorf("upload output %s: %w", o.Name, err)
				}
				st.fail(err)
				break
			}
			fmt.Fprintf(r.Log, "uploaded output %s: %d bytes\n", o.Name, o.Size)
		}
	}
	// The logs go up whatever happened (a failed job's most of all); one that
	// cannot is left out of the result, which still goes up.
	var sent []mj.LogFile
	lctx, lcancel := logContext(ctx) // past a timeout too: it says why
	defer lcancel()
	for _, l := range logs {
		if err := r.uploadLog(lctx, client, dest(logPath(l.Command)), l); err != nil {
			fmt.Fprintf(r.Log, "upload log of command %d: %v\n", l.Command, err)
			continue
		}
		sent = append(sent, l)
	}
	res := &mj.Result{JobID: m.JobID, Attempt: m.Attempt, AllocID: strings.TrimSuffix(alloc, "/"), Succeeded: !st.Failed, ErrorMessage: st.Error, InputBytes: st.InputBytes, Logs: sent,
		Analysis: mj.BoundAnalysis(st.Analysis), Usage: resultUsage(st, nil)}
	if !st.Failed {
		res.Outputs = st.Outputs
		res.Usage = resultUsage(st, st.Outputs)
		fmt.Fprintf(r.Log, "job succeeded: %d output file(s)\n", len(res.Outputs))
	}
	// The result goes up even past the deadline: it says the job timed out.
	if err := put(ctx, store, dest("result.json"), strings.NewReader(mustJSON(res)), -1); err != nil {
		return res, fmt.Errorf("report result: %w", err)
	}
	return res, nil
}

// storeError is an upload the service's own storage did not take for its own
// reasons (storeTrouble), not a destination's of the user's.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// reportContext bounds ctx to the job's deadline plus the manifest's
// ReportSeconds (30 when unset); a job without a timeout is not bounded.
func reportContext(ctx context.Context, m *mj.Manifest, st *State) (context.Context, context.CancelFunc) {
	if st.Deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	window := time.Duration(m.ReportSeconds) * time.Second
	if window <= 0 {
		window = 30 * time.Second
	}
	return context.WithDeadline(ctx, st.Deadline.Add(window))
}

// logContext is the logs' share of ctx: two minutes at most, and only the first
// half of what is left before ctx's deadline, so the result still goes up after.
func logContext(ctx context.Context) (context.Context, context.CancelFunc) {
	limit := 2 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl)/2)
	}
	return context.WithTimeout(ctx, limit)
}

// openOutput opens outputs/<name> of root for upload: never through a link, the
// file or its directory (a name has at most one), and a regular file only (the
// caller checks that on the open file).
func openOutput(root *os.Root, name string) (*os.File, error) {
	if dir, _, ok := strings.Cut(name, "/"); ok {
		if fi, err := root.Lstat("outputs/" + dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("outputs/%s is not a directory", dir)
		}
	}
	return root.OpenFile("outputs/"+name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
}

func put(ctx context.Context, client *http.Client, url string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	if rs, ok := body.(io.ReadSeeker); ok {
		req.GetBody = func() (io.ReadCloser, error) {
			_, err := rs.Seek(0, io.SeekStart)
			return io.NopCloser(rs), err
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		return mj.RedactError(unwrapURLError(err), url)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(b)))}
	}
	return nil
}

// statusError is an answer other than 2xx.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// storeTrouble tells an upload the service's storage did not take for its own
// reasons (unreachable, 5xx, 429: after the patient retries) from one it
// refused for the file's (413 too large, 403), which fails the job as before.
func storeTrouble(err error) bool {
	var se *statusError
	return !errors.As(err, &se) || se.code >= 500 || se.code == http.StatusTooManyRequests
}

// uploadLinks returns where each file of the attempt goes. With m.UploadsURL the
// runner asks the gateway for one link per file it found (the store's own
// presigned PUTs with S3, so no byte passes through a gateway); otherwise the
// manifest's signed template serves every name.
func (r *Runner) uploadLinks(ctx context.Context, client *http.Client, m *mj.Manifest, st *State, logs []mj.LogFile, alloc string) (func(string) string, map[string]string, error) {
	if m.UploadsURL == "" {
		return func(path string) string { return uploadURL(m, alloc+path) }, nil, nil
	}
	files := []string{"result.json"}
	if !st.Failed {
		for _, o := range st.Outputs {
			files = append(files, "outputs/"+o.Name)
		}
	}
	for _, l := range logs {
		files = append(files, logPath(l.Command))
	}
	ask := map[string]any{"alloc": strings.TrimSuffix(alloc, "/"), "files": files, "destinations": true}
	if t := r.ticket(); t != "" {
		ask["ticket"] = t // a docker pool's upload task: no identity of its own
	}
	body := mustJSON(ask)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.UploadsURL, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// The job's output_destinations go only to the allocation running it: its
	// Nomad workload identity says which (the jobspecs' identity "mediajobs").
	if token := identityToken(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, mj.RedactError(unwrapURLError(err), m.UploadsURL)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode == http.StatusNotFound && m.UploadURL != "" && strings.Contains(string(b), "no such route") {
		// A gateway older than the dispatcher has no /upload-urls/: the template.
		return func(path string) string { return uploadURL(m, alloc+path) }, nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("upload links: HTTP %s: %s", resp.Status, lastLines(string(b), 3))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return nil, nil, &linksRefused{err}
		}
		return nil, nil, err
	}
	var out struct {
		Data struct {
			URLs map[string]string `json:"urls"`
			// Destinations: "outputs/<name>" → the user's URL (destinations.go).
			Destinations map[string]string `json:"destinations"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, fmt.Errorf("upload links: %w", err)
	}
	for _, f := range files {
		if out.Data.URLs[f] == "" && out.Data.Destinations[f] == "" {
			return nil, nil, &linksRefused{fmt.Errorf("upload links: none for %s", f)}
		}
	}
	return func(path string) string { return out.Data.URLs[path] }, out.Data.Destinations, nil
}

// identityToken is the task's Nomad workload identity for the gateway
// (${NOMAD_SECRETS_DIR}/nomad_mediajobs.jwt, renewed by Nomad: read each time),
// or "" outside Nomad.
func identityToken() string {
	dir := os.Getenv("NOMAD_SECRETS_DIR")
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, "nomad_mediajobs.jwt"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// allocPrefix is where this allocation's files go within the attempt's upload
// scope: "<alloc id>/". Nomad may run an attempt twice (it replaces an allocation
// whose node was lost, whatever the reschedule policy), and each copy keeps its
// files apart; the dispatcher publishes those of the allocation it applies.
func allocPrefix() string {
	id := os.Getenv("NOMAD_ALLOC_ID")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return ""
	}
	return id + "/"
}

// allocPrefix is where this run's files go: "<RunID>/" when RunID is a UUID (a
// warm runner's lease), else the allocation's (the function of the same name).
func (r *Runner) allocPrefix() string {
	if _, err := uuid.Parse(r.RunID); err == nil && len(r.RunID) == 36 {
		return r.RunID + "/"
	}
	return allocPrefix()
}

func uploadURL(m *mj.Manifest, path string) string {
	return strings.Replace(m.UploadURL, "%7Bpath%7D", path, 1)
}

// linksRefused is a gateway's answer that it will not give the upload links asked
// for (a name it refuses, a finished attempt), as opposed to no answer at all.
type linksRefused struct{ err error }

func (e *linksRefused) Error() string { return e.err.Error() }
func (e *linksRefused) Unwrap() error { return e.err }
