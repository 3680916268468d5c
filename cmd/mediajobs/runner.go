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
)

// jobFailed exits 1: the job failed and said why in its result.
type jobFailed struct{ msg string }

func (e jobFailed) Error() string { return e.msg }
func (e jobFailed) ExitCode() int { return 1 }

type exit2 struct{ error }

func (exit2) ExitCode() int { return 2 }

// runRunner runs one job, or one phase of it, inside a Nomad task.
//
//	-phase all       everything in this process (raw_exec pools)
//	-phase fetch     inputs into inputs/ (docker prestart task, with network)
//	-phase exec      the commands, outputs probed (docker main task, no network)
//	-phase upload    outputs and result to the gateway (docker poststop task)
//	-phase progress  posts the progress file while exec runs (docker sidecar)
//
// Exit codes: 0 the job (so far) succeeded; 1 it failed and that is reported (or,
// for fetch/exec, recorded for upload to report); 2 nothing could be reported. So
// the allocation's status in the Nomad UI matches the job's.
func runRunner(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	manifest := fs.String("manifest", "local/manifest.json", "the dispatch payload")
	work := fs.String("workdir", "work", "the job's working directory")
	phase := fs.String("phase", "all", "all, fetch, exec, upload or progress")
	ffmpeg := fs.String("ffmpeg", envOr("MEDIAJOBS_FFMPEG", "ffmpeg"), "ffmpeg binary")
	ffprobe := fs.String("ffprobe", envOr("MEDIAJOBS_FFPROBE", "ffprobe"), "ffprobe binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := runner.LoadManifest(ctx, *manifest)
	if err != nil {
		return exit2{err}
	}
	if err := os.MkdirAll(*work, 0o750); err != nil {
		return exit2{err}
	}
	r := &runner.Runner{FFmpeg: *ffmpeg, FFprobe: *ffprobe, WorkDir: *work, Log: stdout}
	progressFile := filepath.Join(*work, ".mediajobs-progress.json")
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
	case "exec":
		st := r.LoadState()
		r.ProgressFile = progressFile
		r.Exec(ctx, m, st)
		if err := r.SaveState(st); err != nil {
			return exit2{err}
		}
		if st.Failed {
			return jobFailed{fmt.Sprintf("job %s failed: %s", m.JobID, st.Error)}
		}
		return nil
	case "upload":
		res, err := r.Upload(ctx, m, r.LoadState())
		if err != nil {
			return exit2{err}
		}
		_ = res // a failed job already failed the exec task
		return nil
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
