package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/chunked"
	"github.com/mediajobs/mediajobs/command"
	"golang.org/x/sys/unix"
)

// A job of a chunked pipeline (docs/chunked.md) runs a phase over the user's
// command instead of its commands: the command is checked as any (prepare,
// with the user's own input and output names), read by chunked.Parse, and
// turned into the phase's ffmpeg runs. Probes and the verification's decodes
// run in the sandbox as ffmpeg does.

// The job's directories, relative to its working directory.
const (
	jobInputs  = "inputs/"
	jobOutputs = "outputs/"
)

// planFile is the plan step's plan.json: the source's index and the chunks,
// what the stitch needs to join and verify.
type planFile struct {
	Source *chunked.Source `json:"source"`
	Chunks []chunked.Chunk `json:"chunks"`
}

// chunkPhase is what a phase runs: its ffmpeg argvs, in the job's directory,
// then after (a probe's files, the verification), once they all succeeded.
type chunkPhase struct {
	argvs [][]string
	after func(ctx context.Context) error
}

// chunkCommand is the user's command of chunk job m, as chunked reads it.
func (r *Runner) chunkCommand(m *mj.Manifest) (*chunked.Command, error) {
	t := m.Chunk
	if len(m.FFmpegCommands) != 1 {
		return nil, fmt.Errorf("a chunked job's step has one command, not %d", len(m.FFmpegCommands))
	}
	spec := command.Spec{Inputs: map[string]bool{t.Input: true}, Outputs: map[string]bool{t.Output: true}, AllowGPU: r.AllowGPU, Worker: command.WorkerOptions(r.FFmpeg)}
	argv, err := prepare(m.FFmpegCommands[0], spec)
	if err != nil {
		return nil, fmt.Errorf("command 1: %v", err)
	}
	return chunked.Parse(argv)
}

// chunkContext makes chunked's probes and decodes run as the runner's tools,
// each releasing its sandbox's device copies once it has exited: ctx lasts the
// whole phase.
func (r *Runner) chunkContext(ctx context.Context) context.Context {
	return chunked.WithCommander(ctx, func(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
		return r.readOnlyCommand(ctx, name, args...)
	}, released)
}

func (r *Runner) ffmpegBin() string {
	if r.FFmpeg == "" {
		return "ffmpeg"
	}
	return r.FFmpeg
}

// chunkPhase plans what phase m.Chunk runs.
func (r *Runner) chunkPhase(ctx context.Context, m *mj.Manifest) (*chunkPhase, error) {
	t := m.Chunk
	cmd, err := r.chunkCommand(m)
	if err != nil {
		return nil, err
	}
	ctx = r.chunkContext(ctx)
	switch t.Phase {
	case mj.PhasePlan:
		src, err := chunked.Probe(ctx, r.ffprobe(), cmd.Input)
		if err != nil {
			return nil, err
		}
		if err := cmd.CheckSource(src); err != nil {
			return nil, err
		}
		var chunks []chunked.Chunk
		if t.SceneCuts {
			chunks, err = src.PlanSceneCuts(ctx, r.ffmpegBin(), t.ChunkSeconds, t.MaxChunks)
		} else {
			chunks, err = src.Plan(t.ChunkSeconds, t.MaxChunks)
		}
		if err != nil {
			return nil, err
		}
		// The frames around each chunk that its filters read (yadif).
		before, after := cmd.Reach()
		src.Roll(chunks, before, after)
		ph := &chunkPhase{}
		for i, c := range chunks {
			ph.argvs = append(ph.argvs, chunked.SplitArgs(src, cmd, c, jobOutputs+mj.ChunkFileName(i)))
		}
		ph.after = func(context.Context) error {
			list := mj.ChunkList{Aux: cmd.NeedsAux(src)}
			for _, c := range chunks {
				b, _ := json.Marshal(c)
				list.Chunks = append(list.Chunks, b)
			}
			if err := r.writeJobFile(jobOutputs+mj.ChunkListFile, list); err != nil {
				return err
			}
			if slices.Contains(m.OutputNames, mj.ChunkSourceFile) {
				// "quality": the steps that need the whole source read the
				// file probed and split here, so the user's URL is
				// fetched once. Moved, not copied: the splits are done.
				if err := r.moveJobFile(jobInputs+t.Input, jobOutputs+mj.ChunkSourceFile); err != nil {
					return fmt.Errorf("keeping the source for the quality comparison: %v", err)
				}
			}
			return r.writeJobFile(jobOutputs+mj.ChunkPlanFile, planFile{Source: src, Chunks: chunks})
		}
		fmt.Fprintf(r.Log, "planned %d chunks of the source\n", len(chunks))
		return ph, nil
	case mj.PhaseEncode:
		var c chunked.Chunk
		if err := json.Unmarshal(t.Chunk, &c); err != nil {
			return nil, fmt.Errorf("the chunk to encode: %v", err)
		}
		enc := jobOutputs + mj.ChunkFileName(c.Index)
		ph := &chunkPhase{argvs: [][]string{chunked.EncodeArgs(cmd, c, jobInputs+"chunk", enc)}}
		// verify: the chunk decoded alone here, in parallel with the other
		// chunks, so that the stitch decodes only the stitched file.
		ph.after = func(context.Context) error {
			h, err := chunked.HashChunk(ctx, r.ffmpegBin(), cmd.Codec(), enc)
			if err != nil {
				return fmt.Errorf("decoding the encoded chunk: %w", err)
			}
			return r.writeJobFile(jobOutputs+mj.ChunkHashesFileName(c.Index), h)
		}
		return ph, nil
	case mj.PhaseAudio:
		return &chunkPhase{argvs: [][]string{chunked.AuxArgs(cmd, jobOutputs+mj.AuxFileName(t.Output))}}, nil
	case mj.PhaseReference:
		return &chunkPhase{argvs: [][]string{chunked.ReferenceArgs(cmd, jobOutputs+mj.ChunkReferenceFile)}}, nil
	case mj.PhaseStitch:
		return r.stitchPhase(ctx, m, cmd)
	}
	return nil, fmt.Errorf("unknown chunked phase %q", t.Phase)
}

// stitchPhase joins the encoded chunks (inputs c0000...) with the rest (aux)
// and verifies the result against the chunks' hashes (inputs h0000...): a
// file that fails is removed, and the job fails with the report's failures,
// so a wrong file is never published.
func (r *Runner) stitchPhase(ctx context.Context, m *mj.Manifest, cmd *chunked.Command) (*chunkPhase, error) {
	var plan planFile
	if err := r.readJobFile(jobInputs+"plan", &plan); err != nil {
		return nil, fmt.Errorf("the plan: %v", err)
	}
	if plan.Source == nil || len(plan.Chunks) != m.Chunk.Chunks {
		return nil, fmt.Errorf("the plan has %d chunks, the step %d", len(plan.Chunks), m.Chunk.Chunks)
	}
	names, hashes := make([]string, len(plan.Chunks)), make([]*chunked.ChunkHashes, len(plan.Chunks))
	for i := range plan.Chunks {
		names[i] = mj.ChunkInputName(i)
		// verify: each chunk's hashes, from its encode; one missing or
		// unreadable is the report's failure naming the chunk.
		var h chunked.ChunkHashes
		if err := r.readJobFile(jobInputs+mj.ChunkHashesInputName(i), &h); err == nil {
			hashes[i] = &h
		}
	}
	// The list sits beside the chunks: its names are relative to it.
	list := jobInputs + "chunks.ffconcat"
	if err := r.writeJobText(list, chunked.ConcatList(plan.Chunks, names)); err != nil {
		return nil, err
	}
	aux := ""
	if _, ok := m.InputFiles["aux"]; ok {
		aux = jobInputs + "aux"
	}
	ph := &chunkPhase{argvs: [][]string{chunked.StitchArgs(plan.Source, cmd, list, aux)}}
	ph.after = func(context.Context) error {
		rep, err := chunked.Verify(ctx, r.ffmpegBin(), r.ffprobe(), plan.Source, plan.Chunks, hashes, cmd.Output)
		if err != nil {
			return fmt.Errorf("verifying the stitched file: %w", err)
		}
		if _, ok := m.InputFiles[mj.ChunkReferenceInput]; ok && rep.Pass {
			rep.Quality = r.measureQuality(ctx, cmd.Output, plan.Chunks)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if err := r.writeJobFile(jobOutputs+mj.ChunkVerification, rep); err != nil {
			return err
		}
		if !rep.Pass {
			r.removeJobFile(cmd.Output) // "outputs/<name>", as Parse read it
			return &verifyError{rep}
		}
		fmt.Fprintf(r.Log, "the stitched file passed its verification: %d frames\n", rep.DecodedFrames)
		return nil
	}
	return ph, nil
}

// measureQuality measures the stitched file (verified) and the reference
// step's single-pass encode against the source (docs/chunked.md#quality).
// It fails nothing: within half the job's time left, so that a slow
// measurement leaves the stitch its time to publish, what it could not
// measure is said in the report's error.
func (r *Runner) measureQuality(ctx context.Context, stitched string, chunks []chunked.Chunk) *chunked.Quality {
	qctx, cancel := ctx, context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		qctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
	}
	defer cancel()
	q := chunked.MeasureQuality(qctx, r.ffmpegBin(), r.ffprobe(), jobInputs+mj.ChunkSourceInput, stitched, jobInputs+mj.ChunkReferenceInput, chunks)
	if q.Error != "" && qctx.Err() != nil && ctx.Err() == nil {
		q.Error = "stopped at half the job's time left (timeout_seconds), so that the verified file is still published: " + q.Error
	}
	if q.Error != "" {
		fmt.Fprintf(r.Log, "quality against a single-pass encode: %s\n", q.Error)
	} else {
		fmt.Fprintf(r.Log, "quality against a single-pass encode: PSNR %.2f dB stitched, %.2f dB single-pass; VMAF: %s\n", q.Stitched.PSNRMean, q.SinglePass.PSNRMean, q.VMAF)
	}
	return q
}

// verifyError fails a stitch whose file failed its verification.
type verifyError struct{ rep *chunked.Report }

func (e *verifyError) Error() string {
	return "the stitched file failed its verification, so it is not published: " + strings.Join(e.rep.Failures, "; ")
}

// verifyAnalysis is the report of err, a failed verification, as the job's
// analysis keeps it (mj.ChunkVerifyFilter); false for any other error.
func verifyAnalysis(err error) (mj.Analysis, bool) {
	var v *verifyError
	if !errors.As(err, &v) {
		return mj.Analysis{}, false
	}
	return mj.Analysis{Command: 1, Filter: mj.ChunkVerifyFilter, Instance: "verification", Data: mj.BoundVerification(v.rep.JSON())}, true
}

// writeJobFile writes v as JSON at rel in the job's directory, from outside
// the sandbox: through an os.Root, never through a link.
func (r *Runner) writeJobFile(rel string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.writeJobText(rel, string(b))
}

func (r *Runner) writeJobText(rel, s string) error {
	root, err := os.OpenRoot(r.WorkDir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return err
	}
	f, err := root.OpenFile(rel, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r *Runner) readJobFile(rel string, v any) error {
	root, err := os.OpenRoot(r.WorkDir)
	if err != nil {
		return err
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewDecoder(f).Decode(v)
}

// moveJobFile renames from to to in the job's directory, through an
// os.Root: neither path may leave it.
func (r *Runner) moveJobFile(from, to string) error {
	root, err := os.OpenRoot(r.WorkDir)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Rename(from, to)
}

func (r *Runner) removeJobFile(rel string) {
	root, err := os.OpenRoot(r.WorkDir)
	if err != nil {
		return
	}
	defer root.Close()
	root.Remove(rel)
}
