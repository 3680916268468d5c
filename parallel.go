package mediajobs

import (
	"encoding/json"
	"fmt"
)

// Chunked encoding (docs/chunked.md): a job whose body asks for "parallel" is
// split into chunks encoded by jobs of their own. The user's job is then a
// parent, never dispatched itself: an internal pipeline of kind
// PipelineKindChunked runs its steps, and the parent follows it.

// Parallel is a job's "parallel": what it asked for, and what the service made
// of it.
type Parallel struct {
	// Mode is ParallelChunked (the job is a parent of a chunked pipeline) or
	// ParallelSingle (it could not be split and, as asked with fallback, runs
	// as one ordinary job; Reason says why).
	Mode         string  `json:"mode"`
	Reason       string  `json:"reason,omitempty"`
	ChunkSeconds float64 `json:"chunk_seconds,omitempty"`
	MaxWorkers   int     `json:"max_workers,omitempty"`
	MaxChunks    int     `json:"max_chunks,omitempty"`
	Fallback     bool    `json:"fallback,omitempty"`
	// SceneCuts moves cuts to nearby scene changes (the plan step measures
	// the keyframes around each cut: docs/chunked.md).
	SceneCuts bool `json:"scene_cuts,omitempty"`
	// Quality: the pipeline also encodes the whole source in one go (step
	// reference), and the stitch measures both encodes against the source
	// (the report's "quality"; informative, it fails nothing).
	Quality bool `json:"quality,omitempty"`
	// PipelineID is the parent's pipeline (its steps: plan, encode, audio,
	// stitch), fixed when the parent is created.
	PipelineID string `json:"pipeline_id,omitempty"`
	// Verification is the stitch step's report (chunked.Report), once it
	// ran, within MaxVerificationBytes (BoundVerification); the whole report
	// is the stitch job's output ChunkVerification (the parent's outputs are
	// its declared output alone).
	Verification json.RawMessage `json:"verification,omitempty"`
	// Usage is, once the job ended, the sum of its pipeline's jobs' usage
	// (dispatcher/chunked.go): what the job's views show as its usage. A
	// summary only, never metered: each of those jobs was metered as it
	// ended, and the store meters Job.Usage alone, which a parent never has.
	Usage *Usage `json:"usage,omitempty"`
}

// ChunkVerifyFilter names, in a stitch job's analysis, the report of a
// verification that failed (its file, not published, has no report beside
// it): the parent's view carries it.
const ChunkVerifyFilter = "chunked-verify"

// MaxVerificationBytes bounds the report a parent's record keeps.
const MaxVerificationBytes = 8 << 10

// BoundVerification is report as a parent keeps it: whole within
// MaxVerificationBytes, else its verdict, frame counts and first failures.
func BoundVerification(report []byte) json.RawMessage {
	if len(report) <= MaxVerificationBytes {
		return json.RawMessage(report)
	}
	var r struct {
		Pass           bool     `json:"pass"`
		Failures       []string `json:"failures,omitempty"`
		ExpectedFrames int      `json:"expected_frames"`
		Packets        int      `json:"packets"`
		DecodedFrames  int      `json:"decoded_frames"`
		Whole          string   `json:"whole_report"`
		// Quality is kept, its seams dropped first when too long.
		Quality map[string]json.RawMessage `json:"quality,omitempty"`
	}
	if err := json.Unmarshal(report, &r); err != nil {
		return nil
	}
	r.Whole = "too long to show here: see the output " + ChunkVerification + " of the stitch step's job (parallel.steps)"
	for {
		b, _ := json.Marshal(r)
		if len(b) <= MaxVerificationBytes {
			return b
		}
		if _, ok := r.Quality["seams"]; ok {
			delete(r.Quality, "seams")
			continue
		}
		if len(r.Failures) == 0 {
			return b
		}
		r.Failures = r.Failures[:len(r.Failures)/2]
	}
}

// The modes of Parallel.
const (
	ParallelChunked = "chunked"
	ParallelSingle  = "single"
)

// ChunkedParent reports whether j is the parent of a chunked pipeline: it is
// never queued nor dispatched (store.derivedOps); its pipeline's jobs run.
func (j *Job) ChunkedParent() bool {
	return j != nil && j.Parallel != nil && j.Parallel.Mode == ParallelChunked
}

// PipelineKindChunked is the kind of a chunked job's pipeline.
const PipelineKindChunked = "chunked"

// The phases a job of a chunked pipeline runs in the runner instead of its
// commands (ChunkTask.Phase).
const (
	PhasePlan   = "chunk-plan"   // probe the source, plan the chunks, split them
	PhaseEncode = "chunk-encode" // encode one chunk with the user's video options
	PhaseAudio  = "chunk-audio"  // the user's command without its video, once
	PhaseStitch = "chunk-stitch" // join the chunks, mux the rest in, verify
	// PhaseReference encodes the whole source with the user's video options in
	// one go, for the stitch's quality comparison (Parallel.Quality).
	PhaseReference = "chunk-reference"
)

// The files the phases hand each other.
const (
	ChunkPlanFile     = "plan.json"
	ChunkSplitPattern = "chunk_%04d.nut" // the plan's split chunks
	ChunkVerification = "verification.json"
	// ChunkReferenceFile is the reference step's single-pass encode.
	ChunkReferenceFile = "reference.nut"
)

// The stitch's inputs besides the chunks, the plan and "aux", when it measures
// quality: the source and the reference step's encode.
const (
	ChunkSourceInput    = "source"
	ChunkReferenceInput = "reference"
)

// ChunkTask is what a job of a chunked pipeline runs: a phase over the user's
// command, which the runner checks as it checks any command (command.Prepare),
// then turns into the phase's ffmpeg runs (package chunked).
type ChunkTask struct {
	Phase string `json:"phase"`
	// The user's command is the job's one command; Input and Output are its
	// input and output names, as the user wrote them (the job's own input
	// names may differ).
	Input  string `json:"input"`
	Output string `json:"output"`
	// The plan's parameters (PhasePlan).
	ChunkSeconds float64 `json:"chunk_seconds,omitempty"`
	MaxChunks    int     `json:"max_chunks,omitempty"`
	SceneCuts    bool    `json:"scene_cuts,omitempty"`
	// Chunk is the chunk an encode encodes (a chunked.Chunk, from the plan).
	Chunk json.RawMessage `json:"chunk,omitempty"`
	// Chunks is how many chunks the stitch joins; its inputs are named
	// ChunkInputName(i) (with their hashes, ChunkHashesInputName(i)), the
	// plan's file "plan" and the audio step's "aux".
	Chunks int `json:"chunks,omitempty"`
}

// ChunkInputName is the stitch's input name for encoded chunk i.
func ChunkInputName(i int) string { return fmt.Sprintf("c%04d", i) }

// ChunkFileName is the name of chunk i's file, split or encoded.
func ChunkFileName(i int) string { return fmt.Sprintf("chunk_%04d.nut", i) }

// ChunkHashesFileName is the encode's second output: chunk i's frame hashes,
// decoded alone (chunked.ChunkHashes), which the stitch's verification
// compares with the stitched file's instead of decoding every chunk again.
func ChunkHashesFileName(i int) string { return fmt.Sprintf("chunk_%04d.hashes.json", i) }

// ChunkHashesInputName is the stitch's input name for ChunkHashesFileName(i).
func ChunkHashesInputName(i int) string { return fmt.Sprintf("h%04d", i) }

// ParallelView is a job view's "parallel".
type ParallelView struct {
	Mode         string          `json:"mode"`
	Reason       string          `json:"reason,omitempty"`
	ChunkSeconds float64         `json:"chunk_seconds,omitempty"`
	MaxWorkers   int             `json:"max_workers,omitempty"`
	SceneCuts    bool            `json:"scene_cuts,omitempty"`
	Quality      bool            `json:"quality,omitempty"`
	PipelineID   string          `json:"pipeline_id,omitempty"`
	Verification json.RawMessage `json:"verification,omitempty"`
	// Steps are the chunked pipeline's steps as its view shows them (plan,
	// encode with a job per chunk, audio, stitch); the gateway fills them in.
	Steps []StepView `json:"steps,omitempty"`
}

func viewParallel(p *Parallel) *ParallelView {
	if p == nil {
		return nil
	}
	return &ParallelView{Mode: p.Mode, Reason: p.Reason, ChunkSeconds: p.ChunkSeconds, MaxWorkers: p.MaxWorkers,
		SceneCuts: p.SceneCuts, Quality: p.Quality, PipelineID: p.PipelineID, Verification: p.Verification}
}
