package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/runner"
	"github.com/mediajobs/mediajobs/sandbox"
	"golang.org/x/sys/unix"
)

// jobFailed exits 1: the job failed and said why in its result.
type jobFailed struct{ msg string }

func (e jobFailed) Error() string { return e.msg }
func (e jobFailed) ExitCode() int { return 1 }

type exit2 struct{ error }

func (exit2) ExitCode() int { return 2 }

// runRunner runs one job, or one phase of it, inside a Nomad task; with -warm,
// it leases and runs jobs one after another (a warm pool's runner).
//
//	-phase all       everything in this process (raw_exec pools)
//	-phase fetch     inputs into inputs/ (docker prestart task, with network)
//	-phase exec      the commands, outputs probed (docker main task, no network);
//	                 it reads no manifest, only what fetch left without secrets

//	-phase upload    outputs and result to the gateway (docker poststop task)
//	-phase progress  posts the progress file while exec runs (docker sidecar)
//
// Exit codes: 0 the job succeeded (fetch, exec: the phase ran, and any failure is
// recorded for upload to report); 1 it failed and that is reported; 2 nothing could
// be reported. So the allocation's status in the Nomad UI matches the job's, and
// only once the result is uploaded.
func runRunner(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	manifest := fs.String("manifest", "local/manifest.json", "the dispatch payload")
	work := fs.String("workdir", "work", "the job's working directory")
	phase := fs.String("phase", "all", "all, fetch, exec, upload or progress")
	ffmpeg := fs.String("ffmpeg", envOr("MEDIAJOBS_FFMPEG", "ffmpeg"), "ffmpeg binary")
	ffprobe := fs.String("ffprobe", envOr("MEDIAJOBS_FFPROBE", "ffprobe"), "ffprobe binary")
	box := fs.String("sandbox", "bwrap", `where ffmpeg runs: "bwrap" (bubblewrap, raw_exec pools), "container" (docker pools: the container is the sandbox) or "none"`)
	bwrap := fs.String("bwrap", envOr("MEDIAJOBS_BWRAP", "bwrap"), "bubblewrap binary")
	warm := fs.Bool("warm", false, "run as a warm pool's long-lived runner: lease jobs from -control, one at a time (docs/warm.md)")
	pool := fs.String("pool", "", "with -warm: the pool whose jobs to lease")
	control := fs.String("control", "", "with -warm: the service's base URL")
	token := fs.String("identity", filepath.Join(os.Getenv("NOMAD_SECRETS_DIR"), "nomad_mediajobs.jwt"), "with -warm: the Nomad workload identity file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *box == "bwrap" {
		// What a killed runner of this task left in its $TMPDIR: a sandbox's
		// device copies are released when its command exits.
		gone, err := sandbox.RemoveStaleCopies()
		if len(gone) > 0 {
			fmt.Fprintf(stdout, "removed %d stale sandbox device directories\n", len(gone))
		}
		if err != nil {
			fmt.Fprintf(stdout, "stale sandbox device directories: %v\n", err)
		}
	}
	if *warm {
		if *pool == "" || *control == "" {
			return exit2{fmt.Errorf("-warm needs -pool and -control")}
		}
		if *box != "bwrap" {
			// Jobs of different accounts follow each other in one runner.
			return exit2{fmt.Errorf("-warm runs every job under bubblewrap: -sandbox %q is refused", *box)}
		}
		w := &runner.Warm{Control: *control, Pool: *pool, TokenFile: *token, WorkRoot: *work,
			FFmpeg: *ffmpeg, FFprobe: *ffprobe, Bwrap: *bwrap, Log: stdout}
		return w.Serve(ctx)
	}
	r := &runner.Runner{FFmpeg: *ffmpeg, FFprobe: *ffprobe, WorkDir: *work, Log: stdout}
	switch *box {
	case "bwrap":
		r.Sandbox = &sandbox.Bwrap{Path: *bwrap}
	case "container", "none":
	default:
		return exit2{fmt.Errorf(`unknown -sandbox %q: use "bwrap", "container" or "none"`, *box)}
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return exit2{err}
	}
	progressFile := filepath.Join(*work, ".mediajobs-progress.json")
	if *phase == "fetch" || *phase == "upload" {
		// A docker pool's upload task has no workload identity: fetch, which
		// has, leaves it the destinations ticket beside the job's directory.
		r.TicketFile = filepath.Join(filepath.Dir(filepath.Clean(*work)), ".mediajobs-destinations-ticket")
	}
	if *phase == "exec" {
		// ffmpeg runs in this container, as this user: keep this process's memory
		// and environment out of its reach (/proc/1/environ, /proc/1/mem).
		unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
		st := r.LoadState()
		m := st.Job
		if m == nil {
			m = &mj.Manifest{}
		}
		r.ProgressFile = progressFile
		r.Exec(ctx, m, st)
		if err := r.SaveState(st); err != nil {
			return exit2{err}
		}
		// A failure is in the state, and exec exits 0 all the same: Nomad marks an
		// allocation failed as soon as any task fails, before the poststop upload
		// task has reported why, and the dispatcher would retry a job with no result.
		return nil
	}
	m, err := runner.LoadManifest(ctx, *manifest)
	if err != nil {
		return exit2{err}
	}
	switch *phase {
	case "all":
		res, err := r.Run(ctx, m)
		return outcome(m, res, err)
	case "fetch":
		st := r.Fetch(ctx, m)
		if err := r.SaveState(st); err != nil {
			return exit2{err}
		}
		return nil // a failure is in the state: upload reports it
	case "upload":
		res, err := r.Upload(ctx, m, r.LoadState())
		return outcome(m, res, err) // reported: now the allocation may show it failed
	case "progress":
		runner.ForwardProgress(ctx, progressFile, m.ProgressURL)
		return nil
	}
	return exit2{fmt.Errorf("unknown -phase %q", *phase)}
}

func outcome(m *mj.Manifest, res *mj.Result, err error) error {
	if err != nil {
		return exit2{err}
	}
	if !res.Succeeded {
		return jobFailed{fmt.Sprintf("job %s failed: %s", m.JobID, res.ErrorMessage)}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
