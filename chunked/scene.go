package chunked

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// sceneBatch is how many keyframes one ffmpeg run measures (an input each).
const sceneBatch = 16

// SceneCandidates lists the source's keyframes a scene-change plan may move a
// cut to (SceneCandidates over its cuts): the ones SceneScores measures.
func (s *Source) SceneCandidates(chunkSeconds float64, maxChunks int) []float64 {
	times, _ := s.cutTimes()
	return SceneCandidates(times, s.End, chunkSeconds, maxChunks)
}

var scdetRe = regexp.MustCompile(`lavfi\.scd\.score: ([0-9.]+), lavfi\.scd\.time: (-?[0-9.]+)`)

// SceneScores measures how much each keyframe at times (seconds, on the
// source's timeline) differs from the frame before it: scdet's score, 0 to
// 100. Only those two frames are kept: each keyframe is an input of its own,
// seeked to just before the frame before it (the decoder starts at the GOP's
// keyframe before, as any seek), two frames decoded. A keyframe without a
// frame before it scores 0. Runs through ctx's Commander, as the probes.
func (s *Source) SceneScores(ctx context.Context, ffmpeg string, times []float64) (map[float64]float64, error) {
	scores := map[float64]float64{}
	type probe struct{ at, seek float64 }
	var probes []probe
	for _, t := range times {
		scores[t] = 0
		i := sort.Search(len(s.Frames), func(k int) bool { return s.Seconds(s.Frames[k]) >= t-1e-9 })
		if i <= 0 || i >= len(s.Frames) {
			continue
		}
		// Just before the frame before the candidate.
		probes = append(probes, probe{t, s.between(i - 1)})
	}
	for len(probes) > 0 {
		batch := probes[:min(sceneBatch, len(probes))]
		probes = probes[len(batch):]
		// -copyts and -seek_timestamp: times on the source's timeline, as
		// the plan's (a transport stream's clock does not start at 0).
		args := []string{"-nostdin", "-hide_banner", "-nostats", "-v", "info", "-copyts"}
		for _, p := range batch {
			args = append(args, "-protocol_whitelist", "file", "-seek_timestamp", "1", "-ss", seconds(p.seek), "-i", s.Path)
		}
		for i := range batch {
			// threshold 0: every score is printed, with its frame's time.
			args = append(args, "-map", fmt.Sprintf("%d:%d", i, s.VideoIndex), "-frames:v", "2",
				"-filter:v", "scdet=threshold=0", "-f", "null", "-")
		}
		cmd, done, err := toolCommand(ctx, ffmpeg, args...)
		if err != nil {
			return nil, err
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		done()
		if err != nil {
			return nil, fmt.Errorf("measuring scene changes: %s: %v: %s", ffmpeg, err, strings.TrimSpace(tail(errorLines(out.String()), 2000)))
		}
		for _, m := range scdetRe.FindAllStringSubmatch(out.String(), -1) {
			score, err1 := strconv.ParseFloat(m[1], 64)
			at, err2 := strconv.ParseFloat(m[2], 64)
			if err1 != nil || err2 != nil {
				continue
			}
			for _, p := range batch {
				if math.Abs(at-p.at) < s.FrameDuration/2 && score > scores[p.at] {
					scores[p.at] = score
				}
			}
		}
	}
	return scores, nil
}

// errorLines drops scdet's lines from ffmpeg's output, for an error message.
func errorLines(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "lavfi.scd.") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// PlanSceneCuts plans the source's chunks with scene-change cuts: it measures
// the keyframes each cut may move to (SceneScores of SceneCandidates), then
// plans with their scores (PlanScenes).
func (s *Source) PlanSceneCuts(ctx context.Context, ffmpeg string, chunkSeconds float64, maxChunks int) ([]Chunk, error) {
	scores, err := s.SceneScores(ctx, ffmpeg, s.SceneCandidates(chunkSeconds, maxChunks))
	if err != nil {
		return nil, err
	}
	return s.PlanScenes(chunkSeconds, maxChunks, scores)
}
