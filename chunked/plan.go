package chunked

import (
	"fmt"
	"math"
	"sort"
)

// Chunk is one piece of the source's video: the frames shown in [Start, End).
type Chunk struct {
	Index int `json:"index"`
	// Start is the time of the chunk's first frame, a source keyframe; End is
	// the next chunk's Start, or the source's end (seconds, on the source's
	// timeline).
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	// Frames is how many frames the chunk shows: the verification expects
	// exactly these.
	Frames int  `json:"frames"`
	Last   bool `json:"last,omitempty"`
	// The split copies Packets packets, in decode order, from the keyframe
	// FirstPacket on: every packet the chunk's frames need, which for an open
	// GOP includes the next chunk's keyframe and the pictures led by it.
	FirstPacket int `json:"first_packet"`
	Packets     int `json:"packets"`
	// TrimFrom and TrimTo lie halfway between the chunk's first frame and the
	// one before, and its last frame and the next: the encode keeps the frames
	// between them, whatever else the copied packets decode to.
	TrimFrom float64 `json:"trim_from"`
	TrimTo   float64 `json:"trim_to"`
	// SceneCut: the cut before the chunk was moved to a scene change
	// (PlanScenes).
	SceneCut bool `json:"scene_cut,omitempty"`
	// Rotation is the source's display rotation (degrees, as ffprobe reports
	// it): the split's NUT file carries no display matrix, so the encode
	// rotates the pictures as ffmpeg's autorotation would (autorotateFilter).
	Rotation float64 `json:"rotation,omitempty"`
	// Pre- and post-roll (Source.Roll), for a graph whose filters reach
	// neighbouring frames (yadif): the encode filters PreRoll frames before
	// the chunk and PostRoll after it too, those between RollFrom and RollTo
	// (halfway between frames), and keeps the chunk's Frames after the graph.
	// With PreRoll the split starts at the keyframe at SplitKey, seeking to
	// SplitFrom (halfway between it and the frame before).
	PreRoll   int     `json:"pre_roll,omitempty"`
	PostRoll  int     `json:"post_roll,omitempty"`
	RollFrom  float64 `json:"roll_from,omitempty"`
	RollTo    float64 `json:"roll_to,omitempty"`
	SplitKey  float64 `json:"split_key,omitempty"`
	SplitFrom float64 `json:"split_from,omitempty"`
}

// Rolls tells whether the chunk's encode filters frames outside it (Roll).
func (c Chunk) Rolls() bool { return c.PreRoll > 0 || c.PostRoll > 0 }

// Plan chooses where chunks start: at the keyframe nearest each multiple of
// chunkSeconds after the first keyframe (keyframes sorted, in seconds; end is
// where the last frame ends). With more than maxChunks (when > 0) the chunks
// are made longer so that maxChunks cover the source. No chunk is empty; a
// last chunk shorter than a quarter of chunkSeconds joins the one before.
func Plan(keyframes []float64, end, chunkSeconds float64, maxChunks int) []Chunk {
	return PlanScenes(keyframes, end, chunkSeconds, maxChunks, nil)
}

// Scene-change cuts (PlanScenes): a cut may move to a keyframe within
// SceneWindow × chunk_seconds of where Plan aims it, if that keyframe starts a
// new scene (its scene score, scdet's 0 to 100, at least SceneThreshold) and
// no chunk becomes shorter than half of chunk_seconds. At most
// maxSceneCandidates keyframes per cut (the nearest) are measured.
const (
	SceneWindow        = 0.25
	SceneThreshold     = 10.0 // scdet's default
	maxSceneCandidates = 8
)

// sceneSpan is the setting PlanScenes and SceneCandidates share: the first
// start, the chunk length (made longer for maxChunks) and the chunk count.
func sceneSpan(keyframes []float64, end, chunkSeconds float64, maxChunks int) (start, cs float64, n int) {
	start = keyframes[0]
	cs = chunkSeconds
	if cs <= 0 {
		cs = end - start
	}
	n = int(math.Ceil((end - start) / cs))
	if maxChunks > 0 && n > maxChunks {
		n = maxChunks
		cs = (end - start) / float64(n)
	}
	return start, cs, n
}

// window is the keyframes a cut aimed at target may move to for a scene
// change: within SceneWindow × cs of target, at least cs/2 after prev and
// before end, the nearest maxSceneCandidates.
func window(keyframes []float64, target, prev, end, cs float64) []float64 {
	lo := max(target-SceneWindow*cs, prev+cs/2)
	hi := min(target+SceneWindow*cs, end-cs/2)
	var in []float64
	for j := sort.SearchFloat64s(keyframes, lo); j < len(keyframes) && keyframes[j] <= hi; j++ {
		in = append(in, keyframes[j])
	}
	sort.SliceStable(in, func(a, b int) bool { return math.Abs(in[a]-target) < math.Abs(in[b]-target) })
	if len(in) > maxSceneCandidates {
		in = in[:maxSceneCandidates]
	}
	return in
}

// SceneCandidates lists the keyframes to measure for PlanScenes (sorted): for
// each cut, the nearest of its widest window (the previous cut as early as it
// can be). Once the previous cut is known PlanScenes' window may be narrower and
// its nearest few others, not measured: those have no score and are passed over.
func SceneCandidates(keyframes []float64, end, chunkSeconds float64, maxChunks int) []float64 {
	if len(keyframes) == 0 || end <= keyframes[0] {
		return nil
	}
	start, cs, n := sceneSpan(keyframes, end, chunkSeconds, maxChunks)
	seen := map[float64]bool{}
	var out []float64
	for k := 1; k < n; k++ {
		target := start + float64(k)*cs
		// The widest window: the previous cut as early as it can be.
		for _, kf := range window(keyframes, target, math.Inf(-1), end, cs) {
			if !seen[kf] && kf > start {
				seen[kf] = true
				out = append(out, kf)
			}
		}
	}
	sort.Float64s(out)
	return out
}

// PlanScenes is Plan, with each cut moved to the keyframe of its window
// (window) that has the highest scene score in scores (keyframe time → scdet
// score), when one reaches SceneThreshold; nil scores plan as Plan.
func PlanScenes(keyframes []float64, end, chunkSeconds float64, maxChunks int, scores map[float64]float64) []Chunk {
	if len(keyframes) == 0 || end <= keyframes[0] {
		return nil
	}
	start, cs, n := sceneSpan(keyframes, end, chunkSeconds, maxChunks)
	starts := []float64{start}
	scene := []bool{false}
	for k := 1; k < n; k++ {
		target := start + float64(k)*cs
		j := sort.SearchFloat64s(keyframes, target)
		kf := math.Inf(1)
		if j < len(keyframes) {
			kf = keyframes[j]
		}
		if j > 0 && target-keyframes[j-1] <= kf-target {
			kf = keyframes[j-1]
		}
		// The highest score wins; of equal ones, the nearest (window's order).
		moved, best := false, SceneThreshold
		for _, c := range window(keyframes, target, starts[len(starts)-1], end, cs) {
			if sc, ok := scores[c]; ok && (sc > best || (!moved && sc >= best)) {
				kf, best, moved = c, sc, true
			}
		}
		if kf <= starts[len(starts)-1] || kf >= end {
			continue
		}
		starts = append(starts, kf)
		scene = append(scene, moved)
	}
	if len(starts) > 1 && end-starts[len(starts)-1] < cs/4 {
		starts = starts[:len(starts)-1]
	}
	chunks := make([]Chunk, len(starts))
	for i, s := range starts {
		chunks[i] = Chunk{Index: i, Start: s, End: end, SceneCut: scene[i]}
		if i+1 < len(starts) {
			chunks[i].End = starts[i+1]
		}
	}
	chunks[len(chunks)-1].Last = true
	return chunks
}

// cutTimes are the source's cuts in seconds, and the packet of each.
func (s *Source) cutTimes() ([]float64, map[float64]int) {
	times := make([]float64, len(s.Cuts))
	at := map[float64]int{}
	for i, p := range s.Cuts {
		times[i] = s.Seconds(s.Packets[p].PTS)
		at[times[i]] = p
	}
	return times, at
}

// Plan plans the source's chunks (Plan) at its cuts, and fills in what the
// split, the encodes and the verification need.
func (s *Source) Plan(chunkSeconds float64, maxChunks int) ([]Chunk, error) {
	return s.PlanScenes(chunkSeconds, maxChunks, nil)
}

// PlanScenes is Plan with scene-change cuts (PlanScenes), scores being
// SceneScores of SceneCandidates; nil plans as Plan.
func (s *Source) PlanScenes(chunkSeconds float64, maxChunks int, scores map[float64]float64) ([]Chunk, error) {
	times, at := s.cutTimes()
	chunks := PlanScenes(times, s.End, chunkSeconds, maxChunks, scores)
	if len(chunks) == 0 {
		return nil, fmt.Errorf("the source's video has no frames to plan")
	}
	first := make([]int, len(chunks)) // each chunk's keyframe, a packet index
	for i, c := range chunks {
		first[i] = at[c.Start]
	}
	for i := range chunks {
		c := &chunks[i]
		d := first[i]
		startPTS := s.Packets[d].PTS
		endPTS := int64(math.MaxInt64)
		e := len(s.Packets)
		if !c.Last {
			next := first[i+1]
			endPTS = s.Packets[next].PTS
			// Through the next keyframe and the pictures after it that are
			// shown before it (an open GOP's leading pictures), up to the cut
			// after (whose earlier packets are all shown before it).
			stop := len(s.Packets)
			if i+2 < len(first) {
				stop = first[i+2]
			}
			e = next
			for j := next; j < stop; j++ {
				if s.Packets[j].PTS < endPTS {
					e = j + 1
				}
			}
		}
		lo := sort.Search(len(s.Frames), func(k int) bool { return s.Frames[k] >= startPTS })
		hi := sort.Search(len(s.Frames), func(k int) bool { return s.Frames[k] >= endPTS })
		c.Frames = hi - lo
		c.FirstPacket, c.Packets = d, e-d
		if c.Frames == 0 {
			return nil, fmt.Errorf("chunk %d would have no frames", i) // cannot happen: it starts with a keyframe
		}
		// Frames[lo] is the chunk's keyframe, Frames[hi] the next one's (or
		// past the last frame).
		c.TrimFrom, c.TrimTo = s.between(lo), s.between(hi)
		c.Rotation = s.Rotation
	}
	return chunks, nil
}

// Roll gives each chunk the frames around it that a graph reaching before
// frames back and after frames ahead needs (Command.Reach): the before frames
// shown just before the chunk (none for the first) and the after frames from
// its end on (none for the last). The split then starts at the last cut at or
// before the first of them and copies every packet shown before the end of
// the last; the encode filters them with the chunk and drops them after the
// graph, so each of the chunk's frames is filtered with the neighbours one
// encode gives it. A roll that would reach past the source's first or last
// frame stops there, where one encode's filter meets the same edge.
func (s *Source) Roll(chunks []Chunk, before, after int) {
	if before <= 0 && after <= 0 || len(chunks) < 2 {
		return
	}
	for i := range chunks {
		c := &chunks[i]
		c.RollFrom, c.RollTo = c.TrimFrom, c.TrimTo
		startPTS := s.Packets[c.FirstPacket].PTS // the chunk's keyframe
		lo := sort.Search(len(s.Frames), func(k int) bool { return s.Frames[k] >= startPTS })
		hi := lo + c.Frames
		d, e := c.FirstPacket, c.FirstPacket+c.Packets
		if c.Index > 0 && before > 0 {
			p := max(lo-before, 0)
			c.PreRoll = lo - p
			c.RollFrom = s.between(p)
			// The last cut shown at or before the first pre-roll frame.
			for _, k := range s.Cuts {
				if s.Packets[k].PTS > s.Frames[p] {
					break
				}
				d = k
			}
			c.SplitKey = s.Seconds(s.Packets[d].PTS)
			f := sort.Search(len(s.Frames), func(k int) bool { return s.Frames[k] >= s.Packets[d].PTS })
			c.SplitFrom = s.between(f)
		}
		if !c.Last && after > 0 {
			q := min(hi+after, len(s.Frames))
			c.PostRoll = q - hi
			c.RollTo = s.End
			endPTS := int64(math.MaxInt64)
			if q < len(s.Frames) {
				c.RollTo = s.between(q)
				endPTS = s.Frames[q]
			}
			e = max(e, s.shownBefore(d, endPTS))
		}
		c.FirstPacket, c.Packets = d, e-d
	}
}

// between is the time halfway between frame k (display order) and the one
// before it: a trim from there keeps frame k on.
func (s *Source) between(k int) float64 {
	if k == 0 {
		return s.Start - s.FrameDuration/2
	}
	if k >= len(s.Frames) {
		return s.End
	}
	return (s.Seconds(s.Frames[k-1]) + s.Seconds(s.Frames[k])) / 2
}

// shownBefore is one past the last packet, in decode order from d on, shown
// before endPTS. Past the first cut shown at or after endPTS only that cut's
// leading pictures (an open GOP's) can be, and they end at the cut after it.
func (s *Source) shownBefore(d int, endPTS int64) int {
	stop, seen := len(s.Packets), false
	for _, k := range s.Cuts {
		if k > d && s.Packets[k].PTS >= endPTS {
			if seen {
				stop = k
				break
			}
			seen = true
		}
	}
	e := d
	for j := d; j < stop; j++ {
		if s.Packets[j].PTS < endPTS {
			e = j + 1
		}
	}
	return e
}
