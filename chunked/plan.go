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
}

// Plan chooses where chunks start: at the keyframe nearest each multiple of
// chunkSeconds after the first keyframe (keyframes sorted, in seconds; end is
// where the last frame ends). With more than maxChunks (when > 0) the chunks
// are made longer so that maxChunks cover the source. No chunk is empty; a
// last chunk shorter than a quarter of chunkSeconds joins the one before.
func Plan(keyframes []float64, end, chunkSeconds float64, maxChunks int) []Chunk {
	if len(keyframes) == 0 || end <= keyframes[0] {
		return nil
	}
	start := keyframes[0]
	if chunkSeconds <= 0 {
		chunkSeconds = end - start
	}
	n := int(math.Ceil((end - start) / chunkSeconds))
	if maxChunks > 0 && n > maxChunks {
		n = maxChunks
		chunkSeconds = (end - start) / float64(n)
	}
	starts := []float64{start}
	for k := 1; k < n; k++ {
		target := start + float64(k)*chunkSeconds
		j := sort.SearchFloat64s(keyframes, target)
		kf := math.Inf(1)
		if j < len(keyframes) {
			kf = keyframes[j]
		}
		if j > 0 && target-keyframes[j-1] <= kf-target {
			kf = keyframes[j-1]
		}
		if kf <= starts[len(starts)-1] || kf >= end {
			continue
		}
		starts = append(starts, kf)
	}
	if len(starts) > 1 && end-starts[len(starts)-1] < chunkSeconds/4 {
		starts = starts[:len(starts)-1]
	}
	chunks := make([]Chunk, len(starts))
	for i, s := range starts {
		chunks[i] = Chunk{Index: i, Start: s, End: end}
		if i+1 < len(starts) {
			chunks[i].End = starts[i+1]
		}
	}
	chunks[len(chunks)-1].Last = true
	return chunks
}

// Plan plans the source's chunks (Plan) at its cuts, and fills in what the
// split, the encodes and the verification need.
func (s *Source) Plan(chunkSeconds float64, maxChunks int) ([]Chunk, error) {
	times := make([]float64, len(s.Cuts))
	at := map[float64]int{}
	for i, p := range s.Cuts {
		times[i] = s.Seconds(s.Packets[p].PTS)
		at[times[i]] = p
	}
	chunks := Plan(times, s.End, chunkSeconds, maxChunks)
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
		c.TrimFrom = s.Start - s.FrameDuration/2
		if lo > 0 {
			c.TrimFrom = (s.Seconds(s.Frames[lo-1]) + s.Seconds(startPTS)) / 2
		}
		c.TrimTo = s.End
		if !c.Last {
			c.TrimTo = (s.Seconds(s.Frames[hi-1]) + s.Seconds(endPTS)) / 2
		}
	}
	return chunks, nil
}
