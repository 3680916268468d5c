package mediajobs

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// A chunked job's pipeline (docs/chunked.md): the user's job J is its owner,
// never dispatched itself. The pipeline starts with one step, plan; when the
// plan's job succeeded the leader extends it, in one write of its record,
// with encode (a job per chunk), audio (when the output has other streams)
// and stitch. Every job's id derives from the pipeline's and its place, so
// an extension done twice (a leader that died half-way) names the same jobs,
// and the store creates each once.

// The steps of a chunked pipeline.
const (
	ChunkStepPlan   = "plan"
	ChunkStepEncode = "encode"
	ChunkStepAudio  = "audio"
	ChunkStepStitch = "stitch"
	// ChunkStepReference runs only with "quality": the user's command over
	// the whole source as one encode, beside the chunks; its output is
	// intermediate ("publish": false), for the stitch's comparison.
	ChunkStepReference = "reference"
)

// chunkedSpace names the ids of chunked pipelines' jobs (uuid version 5).
var chunkedSpace = uuid.MustParse("6d2f3c1a-4b5e-4c7d-8e9f-0a1b2c3d4e5f")

// ChunkedJobID is the id of the job at step/item of chunked pipeline pid.
func ChunkedJobID(pid, step string, item int) string {
	return uuid.NewSHA1(chunkedSpace, []byte(fmt.Sprintf("%s/%s/%d", pid, step, item))).String()
}

// ChunkedPipelineID is the id of job j's chunked pipeline.
func ChunkedPipelineID(jobID string) string {
	return uuid.NewSHA1(chunkedSpace, []byte("pipeline/"+jobID)).String()
}

// chunkedInput is j's one input: its name and value.
func chunkedInput(j *Job) (name, value string) {
	for k, v := range j.InputFiles {
		return k, v
	}
	return "", ""
}

// task is the ChunkTask of a job of parent j's pipeline at phase.
func (j *Job) chunkTask(phase string) *ChunkTask {
	in, _ := chunkedInput(j)
	return &ChunkTask{Phase: phase, Input: in, Output: j.OutputNames[0]}
}

// child is a job of parent j's pipeline p at step (item, when not nil).
func (j *Job) child(p *Pipeline, step string, item *int, now time.Time) *Job {
	n := 0
	if item != nil {
		n = *item
	}
	c := &Job{
		ID: ChunkedJobID(p.ID, step, n), AccountID: j.AccountID, Status: StatusQueued,
		Machine: j.Machine, TimeoutSeconds: j.TimeoutSeconds,
		FFmpegCommands: j.FFmpegCommands, Pipeline: &PipelineRef{ID: p.ID, Step: step, Item: item},
		CreatedAt: now, QueuedAt: now, UpdatedAt: now,
	}
	if step == ChunkStepPlan || step == ChunkStepAudio {
		// The steps that may fetch the user's source: the account's cap
		// applies (InputCap).
		c.MaxInputBytes = j.MaxInputBytes
	}
	return c
}

// ChunkStitch reports whether j is a chunked pipeline's stitch job: the
// one that delivers its parent's output_destinations, which stay stored under
// the parent's key (the pipeline's Owner) until the parent ends.
func (j *Job) ChunkStitch() bool {
	return j.Chunk != nil && j.Chunk.Phase == PhaseStitch && j.Pipeline != nil
}

// InputCap is the bytes j's inputs may take in all (0: no cap): the
// account's max_input_bytes, except for a chunked job's steps that read only
// the service's own files (encode, reference, stitch: the stitch reads every
// encoded chunk, together about the output's size). The plan fetches the
// user's source, and the audio step fetches it again unless the plan kept it
// (ChunkSourceFile): both are capped.
func (j *Job) InputCap() int64 {
	if j.Chunk != nil && j.Chunk.Phase != PhasePlan && j.Chunk.Phase != PhaseAudio {
		return 0
	}
	return j.MaxInputBytes
}

// ChunkSourceFile is the plan step's copy of the source as it fetched it,
// kept with "quality" (the file it probed and split, moved to its outputs):
// the reference, the stitch and the audio step read it from storage, so the
// user's URL is fetched once, under the account's max_input_bytes, and a
// presigned URL need only live until the plan fetched it.
const ChunkSourceFile = "source"

// NewChunkedPipeline makes parent j (a job whose Parallel is chunked, as the
// gateway checked it) the owner of a new pipeline, whose one step, plan, is
// planned: its job takes j's input, with what the gateway resolved of it (a
// job: reference's awaits), and j keeps none. j's Parallel names the pipeline.
// The plan's outputs (the split chunks, the plan, with "quality" the source)
// are intermediate: only the pipeline's steps read them, and they are
// deleted, their storage count ended, when the pipeline ends.
func NewChunkedPipeline(j *Job, now time.Time) *Pipeline {
	now = now.UTC()
	p := &Pipeline{ID: ChunkedPipelineID(j.ID), AccountID: j.AccountID, Kind: PipelineKindChunked, Owner: j.ID,
		FailFast: true, CreatedAt: now, UpdatedAt: now}
	plan := j.child(p, ChunkStepPlan, nil, now)
	plan.Pipeline.Intermediate = true
	name, value := chunkedInput(j)
	plan.InputFiles = map[string]string{name: value}
	plan.Awaits, plan.InputKeys, plan.StatusDetail = j.Awaits, j.InputKeys, j.StatusDetail
	plan.OutputNames = []string{ChunkPlanFile, ChunkListFile, ChunkSplitPattern}
	if j.Parallel.Quality {
		plan.OutputNames = append(plan.OutputNames, ChunkSourceFile)
	}
	plan.Chunk = j.chunkTask(PhasePlan)
	plan.Chunk.ChunkSeconds, plan.Chunk.MaxChunks = j.Parallel.ChunkSeconds, j.Parallel.MaxChunks
	plan.Chunk.SceneCuts = j.Parallel.SceneCuts
	p.Steps = []PipelineStep{{Name: ChunkStepPlan, Jobs: []string{plan.ID}, Intermediate: true}}
	p.Plan = []*Job{plan}
	j.Awaits, j.InputKeys, j.StatusDetail = nil, nil, "planning the chunks"
	j.Parallel.PipelineID = p.ID
	return p
}

// ChunkList is the plan step's ChunkListFile: what the leader needs to
// extend the pipeline (the chunks, each as chunked.Chunk's JSON, and whether
// the output needs the audio step); plan.json holds the source's index too,
// for the stitch's verification.
type ChunkList struct {
	Chunks []json.RawMessage `json:"chunks"`
	Aux    bool              `json:"aux"`
}

// ChunkListFile is the plan step's small output the leader reads.
const ChunkListFile = "chunks.json"

// AuxFileName is the audio step's output for a user's output named out.
func AuxFileName(out string) string { return "aux" + path.Ext(out) }

// ExtendChunked is what pipeline p (of parent j) gains once its plan job
// succeeded with list: the steps encode (a job per chunk, at most
// j.Parallel.MaxWorkers at once: encode i also awaits encode i-MaxWorkers,
// succeeded, without taking its file), audio (if list.Aux), reference (if
// j.Parallel.Quality) and stitch, and their
// jobs, every id derived (ChunkedJobID). planKeys are the blob keys of the
// plan job's outputs, by name: the jobs are created with them resolved.
func ExtendChunked(p *Pipeline, j *Job, plan *Job, list *ChunkList, now time.Time) ([]PipelineStep, []*Job, error) {
	now = now.UTC()
	keys := map[string]string{}
	for _, o := range plan.Outputs {
		keys[o.Name] = o.Key
	}
	if keys[ChunkPlanFile] == "" {
		return nil, nil, fmt.Errorf("the plan job made no %s", ChunkPlanFile)
	}
	if len(list.Chunks) == 0 {
		return nil, nil, fmt.Errorf("the plan has no chunks")
	}
	// The source, as the steps after the plan read it: the plan's kept copy
	// with "quality", else the plan's input again (audio alone reads it).
	srcName, srcValue := chunkedInput(plan)
	srcKey := plan.InputKeys[srcName]
	if j.Parallel.Quality {
		if keys[ChunkSourceFile] == "" {
			return nil, nil, fmt.Errorf("the plan job made no %s", ChunkSourceFile)
		}
		srcValue, srcKey = "job:"+plan.ID+"/"+ChunkSourceFile, keys[ChunkSourceFile]
	}
	source := func(name string) (map[string]string, map[string]string) {
		files, keys := map[string]string{name: srcValue}, map[string]string{}
		if srcKey != "" {
			keys[name] = srcKey
		}
		return files, keys
	}
	if m := j.Parallel.MaxChunks; m > 0 && len(list.Chunks) > m {
		// The plan step honours it; a list past it is not trusted.
		return nil, nil, fmt.Errorf("the plan has %d chunks, over its max_chunks (%d)", len(list.Chunks), m)
	}
	workers := max(j.Parallel.MaxWorkers, 1)
	var jobs []*Job
	encode := PipelineStep{Name: ChunkStepEncode, Needs: []string{ChunkStepPlan}}
	for i, c := range list.Chunks {
		name := ChunkFileName(i)
		if keys[name] == "" {
			return nil, nil, fmt.Errorf("the plan job made no %s", name)
		}
		e := j.child(p, ChunkStepEncode, ptr(i), now)
		e.InputFiles = map[string]string{"chunk": "job:" + plan.ID + "/" + name}
		e.InputKeys = map[string]string{"chunk": keys[name]}
		// verify: the chunk's frame hashes, for the stitch (ChunkHashesFileName).
		e.OutputNames = []string{name, ChunkHashesFileName(i)}
		e.Chunk = j.chunkTask(PhaseEncode)
		e.Chunk.Chunk = c
		if i >= workers {
			e.Awaits = []string{ChunkedJobID(p.ID, ChunkStepEncode, i-workers)}
			e.StatusDetail = fmt.Sprintf("waiting for chunk %d to be encoded (max_workers %d)", i-workers, workers)
		}
		var at struct {
			Start, End float64
			Frames     int
			SceneCut   bool `json:"scene_cut"`
		}
		if err := json.Unmarshal(c, &at); err != nil {
			return nil, nil, fmt.Errorf("chunk %d of the plan: %v", i, err)
		}
		item := map[string]string{"chunk": strconv.Itoa(i),
			"start": strconv.FormatFloat(at.Start, 'f', 6, 64), "end": strconv.FormatFloat(at.End, 'f', 6, 64), "frames": strconv.Itoa(at.Frames)}
		if at.SceneCut {
			item["scene_cut"] = "true" // its cut moved to a scene change
		}
		encode.Items = append(encode.Items, item)
		encode.Jobs = append(encode.Jobs, e.ID)
		jobs = append(jobs, e)
	}
	steps := []PipelineStep{encode}
	stitch := j.child(p, ChunkStepStitch, nil, now)
	stitch.InputFiles = map[string]string{"plan": "job:" + plan.ID + "/" + ChunkPlanFile}
	stitch.InputKeys = map[string]string{"plan": keys[ChunkPlanFile]}
	for i, id := range encode.Jobs {
		stitch.InputFiles[ChunkInputName(i)] = "job:" + id + "/" + ChunkFileName(i)
		stitch.InputFiles[ChunkHashesInputName(i)] = "job:" + id + "/" + ChunkHashesFileName(i) // verify
		stitch.Awaits = append(stitch.Awaits, id)
	}
	stitchStep := PipelineStep{Name: ChunkStepStitch, Jobs: []string{stitch.ID}, Needs: []string{ChunkStepPlan, ChunkStepEncode}}
	if list.Aux {
		a := j.child(p, ChunkStepAudio, nil, now)
		a.InputFiles, a.InputKeys = source(srcName)
		a.OutputNames = []string{AuxFileName(j.OutputNames[0])}
		a.Chunk = j.chunkTask(PhaseAudio)
		steps = append(steps, PipelineStep{Name: ChunkStepAudio, Jobs: []string{a.ID}})
		jobs = append(jobs, a)
		stitch.InputFiles["aux"] = "job:" + a.ID + "/" + a.OutputNames[0]
		stitch.Awaits = append(stitch.Awaits, a.ID)
		stitchStep.Needs = append(stitchStep.Needs, ChunkStepAudio)
	}
	if j.Parallel.Quality {
		ref := j.child(p, ChunkStepReference, nil, now)
		ref.Pipeline.Intermediate = true
		ref.InputFiles, ref.InputKeys = source(srcName)
		ref.OutputNames = []string{ChunkReferenceFile}
		ref.Chunk = j.chunkTask(PhaseReference)
		steps = append(steps, PipelineStep{Name: ChunkStepReference, Jobs: []string{ref.ID}, Intermediate: true})
		jobs = append(jobs, ref)
		// The stitch measures both encodes against the source: it takes
		// the plan's copy too, under a name of its own (the user's input
		// name may be any of the stitch's others).
		stitch.InputFiles[ChunkSourceInput] = srcValue
		stitch.InputKeys[ChunkSourceInput] = srcKey
		stitch.InputFiles[ChunkReferenceInput] = "job:" + ref.ID + "/" + ChunkReferenceFile
		stitch.Awaits = append(stitch.Awaits, ref.ID)
		stitchStep.Needs = append(stitchStep.Needs, ChunkStepReference)
	}
	stitch.OutputNames = []string{j.OutputNames[0], ChunkVerification}
	stitch.Chunk = j.chunkTask(PhaseStitch)
	stitch.Chunk.Chunks = len(list.Chunks)
	stitch.StatusDetail = stitch.AwaitingDetail()
	// The stitch alone delivers j's output_destinations, and only a file
	// that passed its verification (the runner uploads nothing of a failed
	// job). The URLs stay under j's key (ChunkStitch): none is copied.
	stitch.HasDestinations = j.HasDestinations
	jobs = append(jobs, stitch)
	return append(steps, stitchStep), jobs, nil
}

func ptr(i int) *int { return &i }
