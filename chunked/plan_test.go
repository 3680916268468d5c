package chunked

import (
	"reflect"
	"testing"
)

func every(step float64, n int) []float64 {
	k := make([]float64, n)
	for i := range k {
		k[i] = float64(i) * step
	}
	return k
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keyframes []float64
		end, cs   float64
		max       int
		want      []float64 // chunk starts
	}{
		{"at every boundary", every(1, 10), 10, 3, 0, []float64{0, 3, 6, 9}},
		{"nearest keyframe", []float64{0, 2.9, 3.2, 7}, 9, 3, 0, []float64{0, 2.9, 7}},
		{"a short last chunk joins the one before", every(1, 11), 10.2, 2, 0, []float64{0, 2, 4, 6, 8}},
		{"a last chunk of a quarter stays", every(1, 11), 10.5, 2, 0, []float64{0, 2, 4, 6, 8, 10}},
		{"max chunks makes them longer", every(1, 60), 60, 5, 4, []float64{0, 15, 30, 45}},
		{"one keyframe, one chunk", []float64{0}, 10, 2, 0, []float64{0}},
		{"sparse keyframes never give empty chunks", []float64{0, 5}, 10, 1, 0, []float64{0, 5}},
		{"a source that starts late", []float64{1.5, 2.5, 3.5}, 4, 1, 0, []float64{1.5, 2.5, 3.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chunks := Plan(tc.keyframes, tc.end, tc.cs, tc.max)
			var starts []float64
			for i, c := range chunks {
				starts = append(starts, c.Start)
				if c.Index != i || c.End <= c.Start || c.Last != (i == len(chunks)-1) {
					t.Errorf("chunk %+v", c)
				}
				if i > 0 && chunks[i-1].End != c.Start {
					t.Errorf("chunk %d starts at %g, the one before ends at %g", i, c.Start, chunks[i-1].End)
				}
			}
			if chunks[len(chunks)-1].End != tc.end {
				t.Errorf("the last chunk ends at %g, want %g", chunks[len(chunks)-1].End, tc.end)
			}
			if !reflect.DeepEqual(starts, tc.want) {
				t.Errorf("starts %v, want %v", starts, tc.want)
			}
		})
	}
}

// An open GOP: the keyframe at 4 is followed in decode order by two pictures
// shown before it. The chunk before gets them (and the keyframe they need);
// a keyframe that an earlier packet is shown after is no cut.
func TestSourcePlanOpenGOP(t *testing.T) {
	// pts in frames (time base 1/1): I0 P3 B1 B2 | I6 B4 B5 P9 B7 B8 | I11(K, but P12 before it is shown later: no cut)
	s := &Source{TBNum: 1, TBDen: 1, Packets: []Packet{
		{PTS: 0, Key: true}, {PTS: 3}, {PTS: 1}, {PTS: 2},
		{PTS: 6, Key: true}, {PTS: 4}, {PTS: 5}, {PTS: 9}, {PTS: 7}, {PTS: 8},
		{PTS: 12}, {PTS: 10, Key: true}, {PTS: 11},
	}}
	for i := range s.Packets {
		s.Packets[i].DTS = int64(i) - 2
	}
	if err := s.index(1); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 4}; !reflect.DeepEqual(s.Cuts, want) {
		t.Fatalf("cuts %v, want %v", s.Cuts, want)
	}
	chunks, err := s.Plan(4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 2 {
		t.Fatalf("chunks %+v, want 2", chunks)
	}
	c0, c1 := chunks[0], chunks[1]
	if c0.Frames != 6 || c0.FirstPacket != 0 || c0.Packets != 7 || c0.TrimTo != 5.5 {
		t.Errorf("chunk 0 = %+v, want 6 frames (0-5) from packets 0-6 (through B5), trimmed at 5.5", c0)
	}
	if c1.Frames != 7 || c1.FirstPacket != 4 || c1.Packets != 9 || c1.TrimFrom != 5.5 {
		t.Errorf("chunk 1 = %+v, want 7 frames (6-12) from packet 4 on, trimmed from 5.5", c1)
	}
}

func TestSourceRefusesBrokenTimestamps(t *testing.T) {
	for name, pkts := range map[string][]Packet{
		"decode timestamps go back": {{PTS: 0, DTS: 0, Key: true}, {PTS: 2, DTS: 2}, {PTS: 1, DTS: 1}},
		"no presentation timestamp": {{PTS: 0, DTS: 0, Key: true}, {PTS: NoDTS, DTS: 1}},
		"two frames at one time":    {{PTS: 0, DTS: 0, Key: true}, {PTS: 1, DTS: 1}, {PTS: 1, DTS: 2}},
		"no keyframe first":         {{PTS: 0, DTS: 0}, {PTS: 1, DTS: 1, Key: true}},
	} {
		s := &Source{TBNum: 1, TBDen: 25, Packets: pkts}
		if err := s.index(1); err == nil {
			t.Errorf("%s: index() = nil, want a refusal", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// Scene-change cuts: a cut moves to the keyframe of its window (±25 % of
// chunk_seconds) with the highest scene score at or past the threshold, never
// making a chunk shorter than half of chunk_seconds; without one it stays at
// the nearest keyframe.
func TestPlanScenes(t *testing.T) {
	kf := every(0.5, 41) // keyframes every 0.5 s, 0 to 20
	for _, tc := range []struct {
		name   string
		end    float64
		scores map[float64]float64
		want   []float64 // chunk starts
		moved  []bool
	}{
		{"no scores: as Plan", 20, nil, []float64{0, 4, 8, 12, 16}, nil},
		{"a scene change in the window", 20, map[float64]float64{5: 40, 9: 5}, []float64{0, 5, 8, 12, 16}, []bool{false, true, false, false, false}},
		{"below the threshold stays", 20, map[float64]float64{5: SceneThreshold - 0.1}, []float64{0, 4, 8, 12, 16}, nil},
		{"outside the window stays", 20, map[float64]float64{5.5: 90}, []float64{0, 4, 8, 12, 16}, nil},
		{"the highest score wins", 20, map[float64]float64{3: 30, 4.5: 60, 5: 20}, []float64{0, 4.5, 8, 12, 16}, []bool{false, true, false, false, false}},
		{"of equal scores the nearest", 20, map[float64]float64{3: 30, 4.5: 30}, []float64{0, 4.5, 8, 12, 16}, []bool{false, true, false, false, false}},
		// A cut moved late leaves the next one room of half a chunk at least:
		// 5 then 7 would leave a chunk of 2.
		{"never a chunk under half", 20, map[float64]float64{5: 40, 7: 40, 7.5: 40}, []float64{0, 5, 7.5, 12, 16}, []bool{false, true, true, false, false}},
		// Nor a last chunk under half: the cut at 16 may not move to 17.
		{"nor a last chunk under half", 18.5, map[float64]float64{17: 80, 15: 20}, []float64{0, 4, 8, 12, 15}, []bool{false, false, false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chunks := PlanScenes(kf, tc.end, 4, 0, tc.scores)
			var starts []float64
			var moved []bool
			anyMoved := false
			for i, c := range chunks {
				starts = append(starts, c.Start)
				moved = append(moved, c.SceneCut)
				anyMoved = anyMoved || c.SceneCut
				if i > 0 && chunks[i-1].End != c.Start || c.End-c.Start < 2 && !c.Last {
					t.Errorf("chunk %+v", c)
				}
			}
			if !anyMoved {
				moved = nil
			}
			if !reflect.DeepEqual(starts, tc.want) || !reflect.DeepEqual(moved, tc.moved) {
				t.Errorf("starts %v moved %v, want %v %v", starts, moved, tc.want, tc.moved)
			}
			// Every keyframe a cut moved to was a candidate to measure.
			cands := map[float64]bool{}
			for _, c := range SceneCandidates(kf, tc.end, 4, 0) {
				cands[c] = true
			}
			for _, c := range chunks {
				if c.SceneCut && !cands[c.Start] {
					t.Errorf("moved to %g, not among SceneCandidates", c.Start)
				}
			}
		})
	}
	if got, want := SceneCandidates(kf, 20, 4, 0), []float64{3, 3.5, 4, 4.5, 5, 7, 7.5, 8, 8.5, 9, 11, 11.5, 12, 12.5, 13, 15, 15.5, 16, 16.5, 17}; !reflect.DeepEqual(got, want) {
		t.Errorf("SceneCandidates = %v, want %v", got, want)
	}
}
