package runner

import (
	"bytes"
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
	"github.com/mediajobs/mediajobs/sandbox"
)

// Warm is the long-lived runner of a warm pool's allocation (docs/warm.md). It
// leases one job at a time from the service with its Nomad workload identity,
// runs it with the same phases as a per-job runner (Run: fetch, exec, upload)
// in a fresh directory, all its commands in one fresh sandbox (OneSandbox),
// renews the lease while the job runs, reports, removes the directory, and
// asks for the next.
type Warm struct {
	Control   string // the service's base URL (server.public_url)
	Pool      string
	TokenFile string // the workload identity Nomad writes, and renews, for the task
	WorkRoot  string // each job runs in a fresh directory under it
	FFmpeg    string
	FFprobe   string
	// Bwrap is the bubblewrap binary; a warm runner always sandboxes: jobs of
	// different accounts follow each other in it.
	Bwrap string
	Log   io.Writer
	// HTTP makes the control calls; nil: a client whose timeout outlasts a poll.
	HTTP *http.Client
	// Ran, when set, is called after each job with its run (tests).
	Ran func(run string)
}

// lease is what a poll hands over (gateway.WarmLease).
type lease struct {
	Run        string          `json:"run"`
	Lease      int64           `json:"lease"`
	TTLSeconds int             `json:"ttl_seconds"`
	JobID      string          `json:"job_id"`
	Attempt    int             `json:"attempt"`
	Manifest   json.RawMessage `json:"manifest"`
}

// errLeaseLost: the service says the run is no longer this runner's.
var errLeaseLost = errors.New("the job's lease lapsed or the job went on without this runner")

// Serve leases and runs jobs until ctx ends. A job running when ctx ends (Nomad
// stops the allocation) is stopped and given back, so it runs again elsewhere.
func (w *Warm) Serve(ctx context.Context) error {
	if w.Log == nil {
		w.Log = io.Discard
	}
	if err := os.MkdirAll(w.WorkRoot, 0o755); err != nil {
		return err
	}
	backoff := time.Second
	for ctx.Err() == nil {
		l, err := w.poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(w.Log, "warm runner: could not lease a job: %v (again in %s)\n", err, backoff)
			sleepCtx(ctx, backoff)
			backoff = min(backoff*2, 15*time.Second)
			continue
		}
		backoff = time.Second
		if l != nil {
			w.run(ctx, l)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// run runs one leased job and reports its end.
func (w *Warm) run(ctx context.Context, l *lease) {
	fmt.Fprintf(w.Log, "warm runner: job %s attempt %d (run %s)\n", l.JobID, l.Attempt, l.Run)
	if _, err := uuid.Parse(l.Run); err != nil || len(l.Run) != 36 {
		fmt.Fprintf(w.Log, "warm runner: the service handed over a run named %q; ignored, its lease lapses\n", l.Run)
		return
	}
	dir := filepath.Join(w.WorkRoot, l.Run)
	defer func() {
		// Nothing one job wrote is left for the next: its processes ended with
		// their sandboxes, and its directory goes.
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(w.Log, "warm runner: remove %s: %v\n", dir, err)
		}
		if w.Ran != nil {
			w.Ran(l.Run)
		}
	}()
	// The job stops when the service says so (cancelled, lease lost) or when
	// this runner is stopped. Renewing starts first: fetching a large manifest
	// may take a while, and the lease's TTL runs from the hand-over. It goes on
	// after the job, whatever ctx does, until /warm/done is acknowledged: a
	// result that is up must not lapse into a rerun while done is retried.
	jctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	rctx, endRenew := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() { defer close(renewed); w.renew(rctx, l, stop) }()
	defer func() { endRenew(); <-renewed }()
	m, err := w.manifest(jctx, l)
	if err != nil {
		if !errors.Is(context.Cause(jctx), errLeaseLost) {
			w.done(l, "fault", err.Error(), renewed)
		}
		return
	}
	r := &Runner{FFmpeg: w.FFmpeg, FFprobe: w.FFprobe, WorkDir: dir, Log: w.Log, RunID: l.Run, Sandbox: &sandbox.Bwrap{Path: w.Bwrap}, OneSandbox: true}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.done(l, "fault", err.Error(), renewed)
		return
	}
	_, err = r.Run(jctx, m)
	switch {
	case errors.Is(context.Cause(jctx), errLeaseLost):
		fmt.Fprintf(w.Log, "warm runner: job %s: %v; nothing reported\n", l.JobID, errLeaseLost)
	case errors.Is(err, ErrStopped):
		w.done(l, "stopped", "the warm runner was stopped", renewed)
	case err != nil: // the result could not be uploaded: nothing to apply
		w.done(l, "fault", err.Error(), renewed)
	default:
		w.done(l, "reported", "", renewed)
	}
}

// manifest decodes the lease's manifest; a large one is fetched from its link,
// through a file outside the job's directory (it holds signed links).
func (w *Warm) manifest(ctx context.Context, l *lease) (*mj.Manifest, error) {
	var m mj.Manifest
	if err := json.Unmarshal(l.Manifest, &m); err != nil {
		return nil, fmt.Errorf("decode the job's manifest: %w", err)
	}
	if m.ManifestURL == "" {
		return &m, nil
	}
	path := filepath.Join(w.WorkRoot, l.Run+".manifest.json")
	if err := os.WriteFile(path, l.Manifest, 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(path)
	return LoadManifest(ctx, path)
}

// renew keeps the lease of l until ctx ends; it stops the job (stop) when the
// service says to, or when it has not renewed for a whole TTL (the lease lapsed:
// the job runs elsewhere).
func (w *Warm) renew(ctx context.Context, l *lease, stop context.CancelCauseFunc) {
	ttl := time.Duration(max(l.TTLSeconds, 1)) * time.Second
	last := time.Now()
	for ctx.Err() == nil {
		var ans struct {
			Stop bool   `json:"stop"`
			Why  string `json:"why"`
		}
		// A call that hangs (a gateway stalled on etcd) is given up in time to
		// try again, perhaps through another gateway, within the TTL.
		cctx, cancel := context.WithTimeout(ctx, max(ttl/2, time.Second))
		status, err := w.call(cctx, "/warm/renew", map[string]any{"pool": w.Pool, "run": l.Run, "lease": l.Lease}, &ans)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case status == http.StatusConflict:
			stop(errLeaseLost)
			return
		case err == nil && ans.Stop:
			fmt.Fprintf(w.Log, "warm runner: job %s: stopping: %s\n", l.JobID, ans.Why)
			stop(errLeaseLost)
			return
		case err == nil:
			last = time.Now()
			continue // the service held the call a moment already
		}
		if time.Since(last) > ttl {
			fmt.Fprintf(w.Log, "warm runner: job %s: no renewal for %s (%v): its lease lapsed; stopping it\n", l.JobID, ttl, err)
			stop(errLeaseLost)
			return
		}
		sleepCtx(ctx, min(time.Second, ttl/4))
	}
}

// poll waits for a job; nil when none came.
func (w *Warm) poll(ctx context.Context) (*lease, error) {
	var l lease
	status, err := w.call(ctx, "/warm/poll", map[string]any{"pool": w.Pool}, &l)
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	return &l, nil
}

// done reports the end of a run: "reported" once result.json is up, or why the
// job is given back without a result. It tries until the service acknowledges
// it, or says the run is no longer this runner's (409), or the lease is gone
// (held, the renewal, ended): the dispatcher then reads the run's result itself.
func (w *Warm) done(l *lease, outcome, why string, held <-chan struct{}) {
	body := map[string]any{"pool": w.Pool, "run": l.Run, "lease": l.Lease, "job_id": l.JobID, "attempt": l.Attempt, "outcome": outcome, "why": why}
	ttl := time.Duration(max(l.TTLSeconds, 1)) * time.Second
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), max(ttl, 10*time.Second))
		status, err := w.call(ctx, "/warm/done", body, nil)
		cancel()
		if err == nil || status == http.StatusConflict {
			if err != nil {
				fmt.Fprintf(w.Log, "warm runner: job %s: report %s: %v\n", l.JobID, outcome, err)
			}
			return
		}
		fmt.Fprintf(w.Log, "warm runner: job %s: report %s (try %d): %v; trying again while the lease holds\n", l.JobID, outcome, try, err)
		t := time.NewTimer(min(time.Duration(try)*500*time.Millisecond, 2*time.Second))
		select {
		case <-held:
			t.Stop()
			fmt.Fprintf(w.Log, "warm runner: job %s: its lease is gone; %s not reported (the service reads the run's result itself)\n", l.JobID, outcome)
			return
		case <-t.C:
		}
	}
}

// call posts body to the service with the workload identity, and decodes a 200
// answer into out. An answer other than 200 or 204 is an error (its status too).
func (w *Warm) call(ctx context.Context, path string, body, out any) (int, error) {
	token, err := os.ReadFile(w.TokenFile) // Nomad renews it: read it each time
	if err != nil {
		return 0, fmt.Errorf("read the workload identity: %w", err)
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(w.Control, "/")+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	client := w.HTTP
	if client == nil {
		client = &http.Client{Timeout: time.Minute}
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if out == nil {
			return resp.StatusCode, nil
		}
		return resp.StatusCode, json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out)
	case http.StatusNoContent:
		return resp.StatusCode, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return resp.StatusCode, fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(msg)))
}
