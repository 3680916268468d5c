package mcp

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
)

// A chunked job (docs/chunked.md) runs as its pipeline's jobs: the tools that
// return a job add "chunks", its progress across them and its verification's
// verdict at a glance (parallel.steps and parallel.verification have it all).

// jobResult is a job as the job tools return it.
type jobResult struct {
	*client.Job
	Chunks *chunkProgress `json:"chunks,omitempty"`
}

// chunkProgress is a chunked job's progress across its chunks.
type chunkProgress struct {
	// Summary is one line: "3/8 chunks done, 2 running; stitch queued" (the
	// steps besides the chunks that have not succeeded).
	Summary string `json:"summary"`
	// Total is 0 until the plan step has cut the source.
	Total   int `json:"total"`
	Done    int `json:"done"`
	Running int `json:"running"`
	Failed  int `json:"failed"`
	// Steps: each step's status (plan, encode, audio, stitch).
	Steps map[string]mj.Status `json:"steps"`
	// Each chunk: its span on the source and its job's state.
	Each         []chunkState         `json:"each,omitempty"`
	Verification *verificationSummary `json:"verification,omitempty"`
}

type chunkState struct {
	Index   int       `json:"index"`
	Start   string    `json:"start,omitempty"`
	End     string    `json:"end,omitempty"`
	Status  mj.Status `json:"status"`
	Percent *float64  `json:"percent,omitempty"`
	JobID   string    `json:"job_id"`
}

// verificationSummary is the stitch's report cut to its verdict, failures
// and each check's outcome.
type verificationSummary struct {
	Pass     bool            `json:"pass"`
	Failures []string        `json:"failures,omitempty"`
	Checks   map[string]bool `json:"checks"`
	Frames   string          `json:"frames"`
}

// report is what the summary reads of the verification report (the fields
// of chunked.Report).
type report struct {
	Pass           bool     `json:"pass"`
	Failures       []string `json:"failures"`
	ExpectedFrames int      `json:"expected_frames"`
	Packets        int      `json:"packets"`
	DecodedFrames  int      `json:"decoded_frames"`
	Chunks         []struct {
		ExpectedFrames int  `json:"expected_frames"`
		DecodedFrames  int  `json:"decoded_frames"`
		HashesMatch    bool `json:"hashes_match"`
		Seam           *struct {
			Keyframe bool    `json:"keyframe"`
			Closed   bool    `json:"closed"`
			Gap      float64 `json:"gap"`
		} `json:"seam"`
	} `json:"chunks"`
	Timestamps *struct {
		Monotonic   bool `json:"monotonic"`
		MatchSource bool `json:"match_source"`
	} `json:"timestamps"`
	Duration *endCheck `json:"duration"`
	AV       *endCheck `json:"av"`
	Decode   *struct {
		Clean bool `json:"clean"`
	} `json:"decode"`
}

type endCheck struct {
	Tolerance float64 `json:"tolerance"`
	OK        bool    `json:"ok"`
}

// result is j as the job tools return it.
func result(j *client.Job) *jobResult {
	if j == nil {
		return nil
	}
	return &jobResult{Job: j, Chunks: progressOf(j)}
}

// chunkedJob reports whether j is the parent of a chunked pipeline.
func chunkedJob(j *client.Job) bool {
	return j != nil && j.Parallel != nil && j.Parallel.Mode == mj.ParallelChunked
}

// progressOf sums up a chunked job's chunks; nil for any other job.
func progressOf(j *client.Job) *chunkProgress {
	if !chunkedJob(j) {
		return nil
	}
	p := &chunkProgress{Steps: map[string]mj.Status{}}
	var others []string
	for _, s := range j.Parallel.Steps {
		p.Steps[s.Name] = s.Status
		if s.Name != "encode" {
			if s.Status != mj.StatusSucceeded {
				others = append(others, s.Name+" "+string(s.Status))
			}
			continue
		}
		for i, c := range s.Jobs {
			p.Total++
			switch c.Status {
			case mj.StatusSucceeded:
				p.Done++
			case mj.StatusRunning:
				p.Running++
			case mj.StatusFailed:
				p.Failed++
			}
			cs := chunkState{Index: i, Start: seconds(c.Item["start"]), End: seconds(c.Item["end"]), Status: c.Status, JobID: c.ID}
			if c.Progress != nil && c.Status == mj.StatusRunning {
				cs.Percent = c.Progress.Percent
			}
			p.Each = append(p.Each, cs)
		}
	}
	switch {
	case p.Total > 0:
		p.Summary = fmt.Sprintf("%d/%d chunks done", p.Done, p.Total)
		if p.Running > 0 {
			p.Summary += fmt.Sprintf(", %d running", p.Running)
		}
		if p.Failed > 0 {
			p.Summary += fmt.Sprintf(", %d failed", p.Failed)
		}
	case p.Steps["plan"] == mj.StatusFailed:
		p.Summary = "no chunks: the plan step failed"
		others = nil
	default:
		p.Summary = "chunks not planned yet (the plan step cuts the source at its keyframes)"
	}
	if len(others) > 0 {
		p.Summary += "; " + strings.Join(others, ", ")
	}
	if len(j.Parallel.Verification) > 0 {
		var r report
		if json.Unmarshal(j.Parallel.Verification, &r) == nil {
			p.Verification = summarise(&r)
			if r.Pass {
				p.Summary += "; verification passed"
			} else {
				p.Summary += "; verification failed"
			}
		}
	}
	return p
}

// summarise is each check of r with whether it held.
func summarise(r *report) *verificationSummary {
	v := &verificationSummary{Pass: r.Pass, Failures: r.Failures, Checks: map[string]bool{},
		Frames: fmt.Sprintf("%d in the source, %d stitched, %d decoded", r.ExpectedFrames, r.Packets, r.DecodedFrames)}
	v.Checks["frames"] = r.ExpectedFrames == r.Packets && r.Packets == r.DecodedFrames
	if len(r.Chunks) > 0 {
		tol := 0.001
		if r.Duration != nil && r.Duration.Tolerance > 0 {
			tol = r.Duration.Tolerance
		}
		chunks, seams, anySeam := true, true, false
		for _, c := range r.Chunks {
			chunks = chunks && c.HashesMatch && c.DecodedFrames == c.ExpectedFrames
			if c.Seam != nil {
				anySeam = true
				seams = seams && c.Seam.Keyframe && c.Seam.Closed && math.Abs(c.Seam.Gap) <= tol
			}
		}
		v.Checks["chunks_match_stitched"] = chunks
		if anySeam {
			v.Checks["seams"] = seams
		}
	}
	if r.Timestamps != nil {
		v.Checks["timestamps"] = r.Timestamps.Monotonic && r.Timestamps.MatchSource
	}
	if r.Duration != nil {
		v.Checks["duration"] = r.Duration.OK
	}
	if r.AV != nil {
		v.Checks["audio_video_end"] = r.AV.OK
	}
	if r.Decode != nil {
		v.Checks["decode"] = r.Decode.Clean
	}
	return v
}

// parallelInput is a job's "parallel", as the API takes it.
type parallelInput struct {
	ChunkSeconds float64 `json:"chunk_seconds,omitempty" jsonschema:"the chunks' length in seconds, cut at the source's keyframes nearest to it (default: the service's, 60)"`
	MaxWorkers   int     `json:"max_workers,omitempty" jsonschema:"at most this many chunks encode at once (default: the service's)"`
	Fallback     bool    `json:"fallback,omitempty" jsonschema:"true: a command that cannot be split runs as one ordinary job instead of being refused"`
	SceneCuts    bool    `json:"scene_cuts,omitempty" jsonschema:"true: move each cut to a nearby scene change among the source's keyframes"`
	Quality      bool    `json:"quality,omitempty" jsonschema:"true: also encode the source in one go and report PSNR and SSIM of both encodes against it (the verification's quality; costs a second full encode)"`
}

func (p *parallelInput) request() *client.Parallel {
	if p == nil {
		return nil
	}
	return &client.Parallel{ChunkSeconds: p.ChunkSeconds, MaxWorkers: p.MaxWorkers, Fallback: p.Fallback, SceneCuts: p.SceneCuts, Quality: p.Quality}
}

// seconds renders a chunk's bound ("2.000000") short.
func seconds(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
