package mediajobs

import (
	"math"
	"time"
)

// Usage is what one job consumed (docs/usage.md): the wall and CPU (user + system)
// time of its ffmpeg and ffprobe processes, GPU time on GPU pools (their wall time
// times the pool's GPUs per job), the input bytes fetched and the output bytes
// stored. Times are seconds, to the millisecond.
type Usage struct {
	WallSeconds float64 `json:"wall_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	GPUSeconds  float64 `json:"gpu_seconds"`
	InputBytes  int64   `json:"input_bytes"`
	OutputBytes int64   `json:"output_bytes"`
}

// maxUsageSeconds bounds a reported time: a worker runs users' commands, and
// whatever it reports must stay a sane number (a year of CPU per job).
const maxUsageSeconds = 366 * 24 * 3600 * 64

// Seconds rounds a time to the millisecond, within [0, maxUsageSeconds]; NaN is 0.
func Seconds(s float64) float64 {
	if !(s > 0) { // NaN or ≤ 0
		return 0
	}
	return math.Round(math.Min(s, maxUsageSeconds)*1000) / 1000
}

// Bounded returns u with every figure within bounds (non-negative, finite).
func (u Usage) Bounded() Usage {
	u.WallSeconds, u.CPUSeconds, u.GPUSeconds = Seconds(u.WallSeconds), Seconds(u.CPUSeconds), Seconds(u.GPUSeconds)
	u.InputBytes, u.OutputBytes = max(u.InputBytes, 0), max(u.OutputBytes, 0)
	return u
}

// SumUsage is the usage of jobs added up in their order (a chunked job's, of
// its pipeline's jobs), Bounded; nil when none has any. Nil jobs are skipped.
func SumUsage(jobs []*Job) *Usage {
	var sum *Usage
	for _, j := range jobs {
		if j == nil || j.Usage == nil {
			continue
		}
		if sum == nil {
			sum = &Usage{}
		}
		*sum = sum.Add(*j.Usage)
	}
	if sum != nil {
		*sum = sum.Bounded() // as stored: the view of a running job and an ended one agree
	}
	return sum
}

// Add returns u plus o.
func (u Usage) Add(o Usage) Usage {
	return Usage{WallSeconds: u.WallSeconds + o.WallSeconds, CPUSeconds: u.CPUSeconds + o.CPUSeconds, GPUSeconds: u.GPUSeconds + o.GPUSeconds,
		InputBytes: u.InputBytes + o.InputBytes, OutputBytes: u.OutputBytes + o.OutputBytes}
}

// AttemptStart is when the current attempt's worker started, or nil when it has
// not (a retried attempt waiting for a node).
func (j *Job) AttemptStart() *time.Time {
	if j.AttemptStartedAt != nil || j.Attempt > 1 {
		return j.AttemptStartedAt
	}
	return j.StartedAt // attempt 1, stored before AttemptStartedAt existed
}

// CancelledUsage is what a job cancelled at now consumed, as far as the service
// knows without its worker's report (docs/usage.md): the wall time of its
// current attempt since it started, and that times gpus as GPU time; nil when
// the attempt had not started.
func CancelledUsage(j *Job, now time.Time, gpus int) *Usage {
	start := j.AttemptStart()
	if start == nil {
		return nil
	}
	wall := Seconds(now.Sub(*start).Seconds())
	u := Usage{WallSeconds: wall, GPUSeconds: wall * float64(gpus)}.Bounded()
	return &u
}
