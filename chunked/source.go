package chunked

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Packet is one video packet of the source, in decode order.
type Packet struct {
	PTS int64 // in the stream's time base
	DTS int64 // NoDTS when the container has none
	Key bool
	// Discard: the demuxer marks it to be decoded and dropped (flag D: an
	// MP4 edit list that starts after it). Read for the stitched file only.
	Discard bool
}

// NoDTS marks a packet without a decode timestamp.
const NoDTS = int64(-1 << 63)

// Source is what the plan needs from the source: its video packets (read from
// the container's index, never decoded) and where its other streams end.
type Source struct {
	Path       string
	VideoIndex int    // the stream index of the video that is chunked
	Codec      string // its codec
	TBNum      int64  // its time base
	TBDen      int64
	Packets    []Packet // decode order
	// Frames are the packets' PTS in presentation order.
	Frames []int64
	// Start is the first frame's time, End the last frame's end (seconds).
	Start, End float64
	// FrameDuration is the typical step between frames: "one frame" in the
	// verification's tolerances.
	FrameDuration float64
	// FormatStart is the container's start time: ffmpeg shifts every stream
	// by it when it encodes.
	FormatStart float64
	// Audio: the first audio stream's start and end, if any.
	HasAudio             bool
	AudioStart, AudioEnd float64
	// Others counts the streams besides the video (audio, subtitles, data,
	// other video).
	Others int
	// OtherVideos are the indexes of the video streams besides the chunked
	// one, Pictures those of attached pictures (cover art): the aux step
	// drops them (-vn), so CheckSource refuses a command that would keep them.
	OtherVideos []int `json:",omitempty"`
	Pictures    []int `json:",omitempty"`
	// Cuts are the keyframes (indexes into Packets) where a chunk may start:
	// no packet before one in decode order is shown after it.
	Cuts []int
	// Rotation is the video's display rotation (degrees, as ffprobe reports
	// it: 90, -90, 180), 0 without one; Probe takes multiples of 90 only.
	Rotation float64 `json:",omitempty"`
}

// Seconds converts a PTS to seconds.
func (s *Source) Seconds(pts int64) float64 {
	return float64(pts) * float64(s.TBNum) / float64(s.TBDen)
}

type probeStream struct {
	Index       int               `json:"index"`
	CodecType   string            `json:"codec_type"`
	CodecName   string            `json:"codec_name"`
	HasBFrames  int               `json:"has_b_frames"`
	TimeBase    string            `json:"time_base"`
	StartTime   string            `json:"start_time"`
	Duration    string            `json:"duration"`
	Disposition map[string]int    `json:"disposition"`
	SideData    []json.RawMessage `json:"side_data_list"`
}

type probeOut struct {
	Streams []probeStream `json:"streams"`
	Format  struct {
		Name      string `json:"format_name"`
		StartTime string `json:"start_time"`
		Duration  string `json:"duration"`
	} `json:"format"`
}

// Probe reads the source's streams and its video's packet index with ffprobe,
// without decoding, and refuses sources whose timestamps cannot be planned on:
// a packet without a PTS, decode timestamps that do not increase, two frames
// at one time, a first packet that is not a keyframe; and a display matrix
// other than a rotation by a multiple of 90° (setRotation).
func Probe(ctx context.Context, ffprobe, path string) (*Source, error) {
	// "-protocol_whitelist file" (each probe here): local files only,
	// whatever the path says (concat:, subfile:, http:), as runner/progress.go.
	out, err := run(ctx, ffprobe, "-v", "error", "-protocol_whitelist", "file", "-show_entries",
		"stream=index,codec_type,codec_name,time_base,start_time,duration:stream_disposition=attached_pic:stream_side_data=rotation,displaymatrix:format=start_time,duration",
		"-of", "json", path)
	if err != nil {
		return nil, fmt.Errorf("probing %s: %w", path, err)
	}
	var p probeOut
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("probing %s: %w", path, err)
	}
	s := &Source{Path: path, VideoIndex: -1}
	var audio probeStream
	s.FormatStart, _ = strconv.ParseFloat(p.Format.StartTime, 64)
	for _, st := range p.Streams {
		if st.CodecType == "video" && st.Disposition["attached_pic"] == 0 && s.VideoIndex < 0 {
			s.VideoIndex, s.Codec = st.Index, st.CodecName
			num, den, ok := strings.Cut(st.TimeBase, "/")
			s.TBNum, _ = strconv.ParseInt(num, 10, 64)
			s.TBDen, _ = strconv.ParseInt(den, 10, 64)
			if !ok || s.TBNum <= 0 || s.TBDen <= 0 {
				return nil, fmt.Errorf("the source's video has no usable time base (%q)", st.TimeBase)
			}
			for _, sd := range st.SideData {
				var r struct {
					Rotation *float64 `json:"rotation"`
					Matrix   string   `json:"displaymatrix"`
				}
				if json.Unmarshal(sd, &r) != nil || r.Rotation == nil {
					continue
				}
				if err := s.setRotation(*r.Rotation, r.Matrix); err != nil {
					return nil, err
				}
			}
			continue
		}
		s.Others++
		if st.CodecType == "video" && st.Disposition["attached_pic"] != 0 {
			s.Pictures = append(s.Pictures, st.Index)
		} else if st.CodecType == "video" {
			s.OtherVideos = append(s.OtherVideos, st.Index)
		}
		if st.CodecType == "audio" && !s.HasAudio {
			s.HasAudio, audio = true, st
		}
	}
	if s.VideoIndex < 0 {
		return nil, fmt.Errorf("the source has no video stream to split")
	}
	// The video's packets, and the audio's with them (every stream's): one
	// pass over the file.
	var sel []string
	if !s.HasAudio {
		sel = []string{"-select_streams", strconv.Itoa(s.VideoIndex)}
	}
	byStream, err := readPackets(ctx, ffprobe, path, sel...)
	if err != nil {
		return nil, err
	}
	if s.HasAudio {
		if sp := byStream[audio.Index]; sp != nil {
			if s.AudioStart, s.AudioEnd, err = packetSpan(path, audio, sp.pkts, sp.lastDur); err != nil {
				return nil, err
			}
		}
	}
	v := byStream[s.VideoIndex]
	if v == nil {
		v = &streamPackets{}
	}
	s.Packets = v.pkts
	if err := s.index(v.lastDur); err != nil {
		return nil, err
	}
	return s, nil
}

// setRotation takes the video's display matrix (rotation in degrees, and the
// matrix as ffprobe prints it): a rotation by a multiple of 90°, which the
// chunks' encodes apply as ffmpeg's autorotation does (autorotateFilter).
// Another angle, or a mirrored picture, is refused: ffmpeg versions differ in
// how they apply those.
func (s *Source) setRotation(rot float64, matrix string) error {
	const fix = "; rotate it in a job of its own (ffmpeg applies it when it encodes), then split that"
	var m []int64
	for _, line := range strings.Split(matrix, "\n") {
		_, row, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(row) {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return fmt.Errorf("the source's video has a display matrix ffprobe printed as %q%s", matrix, fix)
			}
			m = append(m, v)
		}
	}
	if len(m) == 9 && m[0]*m[4]-m[1]*m[3] < 0 {
		return fmt.Errorf("the source's video carries a mirrored display matrix: chunked encoding does not apply it yet%s", fix)
	}
	r := math.Round(rot)
	if math.Abs(rot-r) > 0.01 || int(r)%90 != 0 {
		return fmt.Errorf("the source's video carries rotation metadata of %g°, not a multiple of 90°: chunked encoding does not apply it yet%s", rot, fix)
	}
	if int(r)%360 != 0 {
		s.Rotation = r
	}
	return nil
}

// index checks the packets' timestamps and derives frames, times and cuts.
func (s *Source) index(lastDur int64) error {
	if len(s.Packets) == 0 {
		return fmt.Errorf("the source's video has no packets")
	}
	if !s.Packets[0].Key {
		return fmt.Errorf("the source's video does not start with a keyframe: its first frames cannot be decoded on their own; cut it at a keyframe or re-encode it in a job of its own, then split that")
	}
	const fix = "; remux it with fresh timestamps (-fflags +genpts -c copy) or re-encode it in a job of its own, then split that"
	for i, p := range s.Packets {
		if p.PTS == NoDTS {
			return fmt.Errorf("the source's video has broken timestamps: packet %d has no presentation timestamp%s", i, fix)
		}
	}
	last := NoDTS
	for i, p := range s.Packets {
		if p.DTS == NoDTS {
			continue
		}
		if last != NoDTS && p.DTS <= last {
			return fmt.Errorf("the source's video has broken timestamps: the decode timestamp of packet %d (%.6f s) does not increase after packet %d's (%.6f s)%s", i, s.Seconds(p.DTS), i-1, s.Seconds(last), fix)
		}
		last = p.DTS
	}
	s.Frames = make([]int64, len(s.Packets))
	for i, p := range s.Packets {
		s.Frames[i] = p.PTS
	}
	sort.Slice(s.Frames, func(i, j int) bool { return s.Frames[i] < s.Frames[j] })
	for i := 1; i < len(s.Frames); i++ {
		if s.Frames[i] == s.Frames[i-1] {
			return fmt.Errorf("the source's video has broken timestamps: two frames are shown at %.6f s%s", s.Seconds(s.Frames[i]), fix)
		}
	}
	steps := make([]int64, 0, len(s.Frames))
	for i := 1; i < len(s.Frames); i++ {
		steps = append(steps, s.Frames[i]-s.Frames[i-1])
	}
	step := int64(1)
	if len(steps) > 0 {
		sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
		step = steps[len(steps)/2]
	}
	if lastDur <= 0 {
		lastDur = step
	}
	s.FrameDuration = s.Seconds(step)
	s.Start = s.Seconds(s.Frames[0])
	s.End = s.Seconds(s.Frames[len(s.Frames)-1] + lastDur)
	// A keyframe is a cut when every packet before it in decode order is shown
	// before it: an open GOP's leading pictures come after it and are shown
	// before it; the split gives them to the chunk before (splitRange).
	maxBefore := int64(-1 << 63)
	for i, p := range s.Packets {
		if p.Key && p.PTS > maxBefore {
			s.Cuts = append(s.Cuts, i)
		}
		if p.PTS > maxBefore {
			maxBefore = p.PTS
		}
	}
	return nil
}

// probePackets reads a stream's packets from the container's index: PTS or DTS
// NoDTS where there is none, and the last packet's duration.
func probePackets(ctx context.Context, ffprobe, path string, index int) ([]Packet, int64, error) {
	byStream, err := readPackets(ctx, ffprobe, path, "-select_streams", strconv.Itoa(index))
	if err != nil {
		return nil, 0, err
	}
	sp := byStream[index]
	if sp == nil {
		return nil, 0, nil
	}
	return sp.pkts, sp.lastDur, nil
}

// readPackets reads the packets of path's streams (args select them; none:
// all of them) in one pass, demuxing only, by stream index.
func readPackets(ctx context.Context, ffprobe, path string, args ...string) (map[int]*streamPackets, error) {
	a := append([]string{"-v", "error", "-protocol_whitelist", "file"}, args...)
	out, err := run(ctx, ffprobe, append(a, "-show_entries", "packet=stream_index,pts,dts,duration,flags", "-of", "csv=p=0", path)...)
	if err != nil {
		return nil, fmt.Errorf("reading the packet index of %s: %w", path, err)
	}
	byStream := map[int]*streamPackets{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		index, err := strconv.Atoi(f[0])
		if len(f) < 5 || err != nil {
			return nil, fmt.Errorf("reading the packet index of %s: unexpected line %q", path, line)
		}
		p := Packet{PTS: NoDTS, DTS: NoDTS, Key: strings.HasPrefix(f[4], "K")}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			p.PTS = v
		}
		if v, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			p.DTS = v
		}
		sp := byStream[index]
		if sp == nil {
			sp = &streamPackets{}
			byStream[index] = sp
		}
		sp.pkts = append(sp.pkts, p)
		sp.lastDur, _ = strconv.ParseInt(f[3], 10, 64)
	}
	return byStream, nil
}

// packetSpan is where a stream's packets start and end (seconds): some
// containers' stream durations are estimates (MPEG-TS).
func packetSpan(path string, st probeStream, pkts []Packet, lastDur int64) (start, end float64, err error) {
	if len(pkts) == 0 {
		return 0, 0, nil
	}
	tb := parseTB(st.TimeBase)
	if tb[0] <= 0 || tb[1] <= 0 {
		return 0, 0, fmt.Errorf("stream %d of %s has no usable time base (%q)", st.Index, path, st.TimeBase)
	}
	first, last := pkts[0].PTS, pkts[0].PTS
	for _, p := range pkts {
		if p.PTS == NoDTS {
			continue
		}
		first, last = min(first, p.PTS), max(last, p.PTS)
	}
	sec := func(v int64) float64 { return float64(v) * float64(tb[0]) / float64(tb[1]) }
	return sec(first), sec(last + lastDur), nil
}

func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd, done, err := toolCommand(ctx, name, args...)
	if err != nil {
		return nil, err
	}
	defer done()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(tail(stderr.String(), 2000)))
	}
	return out, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
