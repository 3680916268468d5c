package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mediajobs/mediajobs/runner"
)

// jobFailed exits 1: the job failed and said why in its result.
type jobFailed struct{ msg string }

func (e jobFailed) Error() string { return e.msg }
func (e jobFailed) ExitCode() int { return 1 }

// runRunner runs one job inside a Nomad task. It exits 0 when the job succeeded, 1
// when it failed (result reported), and 2 when it could not report at all, so the
// allocation's status in the Nomad UI matches the job's.
func runRunner(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	manifest := fs.String("manifest", "local/manifest.json", "the dispatch payload")
	work := fs.String("workdir", "work", "the job's working directory")
	ffmpeg := fs.String("ffmpeg", envOr("MEDIAJOBS_FFMPEG", "ffmpeg"), "ffmpeg binary")
	ffprobe := fs.String("ffprobe", envOr("MEDIAJOBS_FFPROBE", "ffprobe"), "ffprobe binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := runner.LoadManifest(ctx, *manifest)
	if err != nil {
		return exit2{err}
	}
	r := &runner.Runner{FFmpeg: *ffmpeg, FFprobe: *ffprobe, WorkDir: *work, Log: stdout}
	res, err := r.Run(ctx, m)
	if err != nil {
		return exit2{err}
	}
	if !res.Succeeded {
		return jobFailed{fmt.Sprintf("job %s failed: %s", m.JobID, res.ErrorMessage)}
	}
	return nil
}

type exit2 struct{ error }

func (exit2) ExitCode() int { return 2 }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
