package chunked

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/testenv"
)

// A source made in the test: the lavfi graph (and encoding) that makes it.
type testSource struct {
	name string
	args []string // ffmpeg arguments that write inputs/src.mp4 (appended)
}

// Tiny pictures: the sources, encodes and decodes must run fast on two cores.
const size = "128x96"

func video(rate, dur string) []string {
	return []string{"-f", "lavfi", "-i", "testsrc2=s=" + size + ":r=" + rate + ":d=" + dur}
}

func tone(dur string) []string {
	return []string{"-f", "lavfi", "-i", "sine=f=440:r=48000:d=" + dur}
}

// x264 with a keyframe every gop frames and no scene cuts, so the tests know
// where the keyframes are.
func x264(gop int) []string {
	return []string{"-c:v", "libx264", "-preset", "veryfast", "-g", fmt.Sprint(gop), "-keyint_min", fmt.Sprint(gop), "-sc_threshold", "0"}
}

var aac = []string{"-c:a", "aac", "-b:a", "64k"}

func cat(parts ...[]string) []string {
	var a []string
	for _, p := range parts {
		a = append(a, p...)
	}
	return a
}

var sources = map[string][]string{
	"cfr24":   cat(video("24", "3"), tone("3"), x264(12), aac),
	"cfr25":   cat(video("25", "3"), tone("3"), x264(12), aac),
	"cfr2997": cat(video("30000/1001", "3"), tone("3"), x264(15), aac, []string{"-video_track_timescale", "30000"}),
	"cfr60":   cat(video("60", "2"), tone("2"), x264(30), aac),
	// A phone's: frames at uneven steps on a 1/90000 time base.
	"vfr": cat([]string{"-f", "lavfi", "-i", "testsrc2=s=" + size + ":r=30:d=3,setpts='(N/30+if(gt(N\\,40)\\,(N-40)*0.0071\\,0)+if(eq(mod(N\\,7)\\,3)\\,0.004\\,0))/TB'"},
		tone("3.3"), x264(15), aac, []string{"-fps_mode", "passthrough", "-enc_time_base", "1/90000", "-video_track_timescale", "90000"}),
	// Open GOPs with B-pyramids: each keyframe after the first is followed in
	// decode order by pictures shown before it.
	"opengop": cat(video("25", "3"), tone("3"), []string{"-c:v", "libx264", "-preset", "veryfast", "-bf", "3",
		"-x264-params", "open-gop=1:keyint=25:min-keyint=25:scenecut=0:b-pyramid=normal"}, aac),
	// 83 frames at 25 fps with a keyframe every 5: the last chunk holds 8.
	"tail": cat(video("25", "3.32"), tone("3.32"), x264(5), aac),
	// Chunks longer than the seams' windows: 250 frames.
	"long":       cat(video("25", "10"), tone("10"), x264(25), aac),
	"audiolong":  cat(video("25", "2"), tone("2.6"), x264(10), aac),
	"audioshort": cat(video("25", "3"), tone("1.5"), x264(10), aac),
	"noaudio":    cat(video("25", "2"), x264(10)),
	// Other containers: Matroska's millisecond time base, and MPEG-TS, whose
	// clock starts at 1.4 s.
	"mkv": cat(video("30000/1001", "3"), tone("3"), x264(15), aac),
	"ts":  cat(video("25", "3"), tone("3"), x264(12), aac),
	// A phone's portrait video: the picture stored 128x96, shown turned by a
	// display matrix (makeSource adds it: rotations).
	"rotated":    cat(video("25", "3"), tone("3"), x264(12), aac),
	"rotated180": cat(video("25", "2"), tone("2"), x264(10), aac),
	"rotated270": cat(video("25", "2"), tone("2"), x264(10), aac),
	// 10-bit 4:2:0 (HEVC Main 10).
	"10bit": cat(video("25", "3"), tone("3"), []string{"-pix_fmt", "yuv420p10le", "-c:v", "libx265", "-preset", "ultrafast",
		"-x265-params", "keyint=12:min-keyint=12:scenecut=0:log-level=error", "-tag:v", "hvc1"}, aac),
	// A hard cut at 2.4 s (frame 60, a keyframe: one every 6 frames) from one
	// picture to another; chunk_seconds 2 would cut at 1.92 s without it.
	"scenes": cat([]string{"-f", "lavfi", "-i", "testsrc2=s=" + size + ":r=25:d=2.4", "-f", "lavfi", "-i", "smptebars=s=" + size + ":r=25:d=2.6"},
		tone("5"), []string{"-filter_complex", "[0:v][1:v]concat=n=2:v=1:a=0[v]", "-map", "[v]", "-map", "2:a"}, x264(6), aac),
}

// rotations are the sources stream-copied with a display matrix (degrees).
var rotations = map[string]int{"rotated": 90, "rotated180": 180, "rotated270": 270}

// srcFile is the source's name: src.mp4 but for the containers tested.
func srcFile(source string) string {
	switch source {
	case "mkv", "ts":
		return "src." + source
	}
	return "src.mp4"
}

// Users' commands, one per encoder; {a} is the audio options.
var encoders = map[string]struct{ args, out string }{
	"libx264":    {"-c:v libx264 -preset veryfast -crf 28 -c:a aac -b:a 64k -movflags +faststart", "out.mp4"},
	"libx265":    {"-c:v libx265 -preset ultrafast -crf 30 -x265-params log-level=error -tag:v hvc1 -c:a aac -b:a 64k", "out.mp4"},
	"libsvtav1":  {"-c:v libsvtav1 -preset 12 -crf 45 -c:a libopus -b:a 64k", "out.mkv"},
	"libvpx-vp9": {"-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 0 -crf 40 -c:a libopus -b:a 64k", "out.webm"},
}

var (
	encodersOnce sync.Once
	encodersHere string
)

// haveEncoders lists the video encoders of the local ffmpeg; in CI every one
// the tests use must be there.
func haveEncoders(t *testing.T, ffmpeg string) string {
	encodersOnce.Do(func() {
		out, _ := exec.Command(ffmpeg, "-hide_banner", "-encoders").Output()
		encodersHere = string(out)
	})
	return encodersHere
}

func needEncoder(t *testing.T, ffmpeg, enc string) {
	t.Helper()
	if !strings.Contains(haveEncoders(t, ffmpeg), " "+enc+" ") {
		testenv.Missing(t, "ffmpeg with the "+enc+" encoder")
	}
}

type rig struct {
	t               *testing.T
	dir             string
	ffmpeg, ffprobe string
	ctx             context.Context
	sceneCuts       bool // plan with scene-change cuts (PlanSceneCuts)
	noRoll          bool // plan without the pre- and post-roll the filters need (Source.Roll)
	// afterStitch, when set, changes the stitched file (its path) before
	// the verification reads it.
	afterStitch func(path string)
}

func newRig(t *testing.T) *rig {
	ffmpeg := testenv.Binary(t, "ffmpeg")
	ffprobe := testenv.Binary(t, "ffprobe")
	dir := t.TempDir()
	for _, d := range []string{"inputs", "outputs", "chunks"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &rig{t: t, dir: dir, ffmpeg: ffmpeg, ffprobe: ffprobe, ctx: ctx}
}

// ffmpeg runs ffmpeg in the rig's directory, as a step runs in its job's.
func (r *rig) run(args ...string) {
	r.t.Helper()
	cmd := exec.CommandContext(r.ctx, r.ffmpeg, append([]string{"-nostdin", "-hide_banner", "-v", "error"}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "SVT_LOG=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("ffmpeg %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 3000))
	}
}

func (r *rig) makeSource(name string) {
	r.t.Helper()
	rot, rotated := rotations[name]
	if !rotated {
		r.run(append(append([]string{"-y"}, sources[name]...), "inputs/"+srcFile(name))...)
		return
	}
	r.run(append(append([]string{"-y"}, sources[name]...), "inputs/plain.mp4")...)
	// ffmpeg 6 and later set the matrix with -display_rotation (7 dropped the
	// rotate tag); 5.1 turns the rotate tag into one.
	cmd := exec.CommandContext(r.ctx, r.ffmpeg, "-nostdin", "-v", "error", "-y", "-display_rotation", fmt.Sprint(rot),
		"-i", "inputs/plain.mp4", "-c", "copy", "inputs/"+srcFile(name))
	cmd.Dir = r.dir
	if cmd.Run() != nil {
		r.run("-y", "-i", "inputs/plain.mp4", "-c", "copy", "-metadata:s:v", fmt.Sprintf("rotate=%d", rot), "inputs/"+srcFile(name))
	}
}

// chunked runs a chunked job the way the service plans it: probe, plan,
// split, encode each chunk (and hash it decoded alone, as its encode job
// does), the rest once, stitch, verify. mutate, when set, changes the plan
// the encodes see (to prove Verify catches a wrong stitch).
func (r *rig) chunked(userCmd string, chunkSeconds float64, mutate func([]Chunk)) (*Report, []Chunk) {
	return r.chunkedHashes(userCmd, chunkSeconds, mutate, nil)
}

// chunkedHashes is chunked, with the chunks' hashes changed by mutateHashes
// (when set) before the verification reads them.
func (r *rig) chunkedHashes(userCmd string, chunkSeconds float64, mutate func([]Chunk), mutateHashes func([]*ChunkHashes)) (*Report, []Chunk) {
	t := r.t
	t.Helper()
	argv, err := command.Prepare(userCmd, testSpec)
	if err != nil {
		t.Fatalf("command.Prepare: %v", err)
	}
	cmd, err := Parse(argv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	src, err := Probe(r.ctx, r.ffprobe, filepath.Join(r.dir, cmd.Input))
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if err := cmd.CheckSource(src); err != nil {
		t.Fatalf("CheckSource: %v", err)
	}
	src.Path = cmd.Input // the steps run in the job's directory
	var chunks []Chunk
	if r.sceneCuts {
		src.Path = filepath.Join(r.dir, cmd.Input)
		chunks, err = src.PlanSceneCuts(r.ctx, r.ffmpeg, chunkSeconds, 0)
		src.Path = cmd.Input
	} else {
		chunks, err = src.Plan(chunkSeconds, 0)
	}
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if len(chunks) < 2 {
		t.Fatalf("plan %+v: want several chunks", chunks)
	}
	if !r.noRoll {
		before, after := cmd.Reach()
		src.Roll(chunks, before, after)
	}
	encodeWith := append([]Chunk(nil), chunks...)
	if mutate != nil {
		mutate(encodeWith)
	}
	var hashes []*ChunkHashes
	var names []string
	for i, c := range encodeWith {
		split := fmt.Sprintf("chunks/split_%03d.nut", i)
		enc := fmt.Sprintf("chunks/enc_%03d.nut", i)
		r.run(SplitArgs(src, cmd, c, split)...)
		if mutate == nil {
			r.checkSplit(src, c, split)
		}
		r.run(EncodeArgs(cmd, c, split, enc)...)
		h, err := HashChunk(r.ctx, r.ffmpeg, cmd.Codec(), filepath.Join(r.dir, enc))
		if err != nil {
			t.Fatalf("HashChunk: %v", err)
		}
		hashes = append(hashes, h)
		names = append(names, filepath.Base(enc))
	}
	if mutateHashes != nil {
		mutateHashes(hashes)
	}
	aux := ""
	if cmd.NeedsAux(src) {
		aux = "chunks/aux" + filepath.Ext(cmd.Output)
		r.run(AuxArgs(cmd, aux)...)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "chunks/list.txt"), []byte(ConcatList(encodeWith, names)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.run(StitchArgs(src, cmd, "chunks/list.txt", aux)...)
	if r.afterStitch != nil {
		r.afterStitch(filepath.Join(r.dir, cmd.Output))
	}
	src.Path = filepath.Join(r.dir, cmd.Input)
	rep, err := Verify(r.ctx, r.ffmpeg, r.ffprobe, src, chunks, hashes, filepath.Join(r.dir, cmd.Output))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep, chunks
}

// checkSplit: the split copied exactly the planned packets, from the chunk's
// keyframe on, with the source's timestamps.
func (r *rig) checkSplit(src *Source, c Chunk, split string) {
	r.t.Helper()
	pkts, _, err := probePackets(r.ctx, r.ffprobe, filepath.Join(r.dir, split), 0)
	if err != nil {
		r.t.Fatal(err)
	}
	st, err := probeStreams(r.ctx, r.ffprobe, filepath.Join(r.dir, split))
	if err != nil {
		r.t.Fatal(err)
	}
	tb := parseTB(st.Streams[0].TimeBase)
	first := float64(pkts[0].PTS) * float64(tb[0]) / float64(tb[1])
	key := c.Start
	if c.PreRoll > 0 {
		key = c.SplitKey
	}
	if len(pkts) != c.Packets || !pkts[0].Key || math.Abs(first-key) > src.Seconds(1)+1e-9 {
		r.t.Fatalf("split of chunk %d: %d packets from %.6f s (key %v), want %d from the keyframe at %.6f s", c.Index, len(pkts), first, pkts[0].Key, c.Packets, key)
	}
}

func (r *rig) mustPass(rep *Report, chunks []Chunk, wantFrames int) {
	r.t.Helper()
	if !rep.Pass {
		r.t.Fatalf("verification failed: %s\nplan %+v\nreport %s", strings.Join(rep.Failures, "; "), chunks, rep.JSON())
	}
	if rep.DecodedFrames != wantFrames || rep.Packets != wantFrames || rep.ExpectedFrames != wantFrames {
		r.t.Fatalf("frames: expected %d, packets %d, decoded %d; want %d", rep.ExpectedFrames, rep.Packets, rep.DecodedFrames, wantFrames)
	}
	// Every output container here keeps the chunks' packets as they are
	// (PacketFilter), so only the seams are decoded again.
	if rep.Decode.Mode != DecodeSeams || rep.Decode.Frames == 0 || rep.Decode.Frames > wantFrames {
		r.t.Fatalf("decode %+v, want the seams decoded", rep.Decode)
	}
	for _, c := range rep.Chunks {
		if c.DecodedFrames != c.ExpectedFrames || !c.HashesMatch || !c.PacketsMatch || (c.Index > 0 && (c.Seam == nil || !c.Seam.Keyframe || !c.Seam.Closed)) {
			r.t.Fatalf("chunk %+v", c)
		}
	}
}

// The corpus: every source through one encoder (all four on the CFR 25 one),
// split, encoded, stitched and verified with exact frame counts.
func TestChunkedEndToEnd(t *testing.T) {
	type tc struct {
		source, encoder string
		chunkSeconds    float64
		frames          int
	}
	cases := []tc{
		{"cfr25", "libx264", 1, 75},
		{"cfr25", "libx265", 1, 75},
		{"cfr25", "libsvtav1", 1, 75},
		{"cfr25", "libvpx-vp9", 1, 75},
		{"cfr24", "libx265", 1, 72},
		{"cfr2997", "libx264", 1, 90},
		{"cfr60", "libvpx-vp9", 0.5, 120},
		{"vfr", "libx264", 1, 90},
		{"opengop", "libx264", 1, 75},
		{"opengop", "libx265", 1, 75},
		{"tail", "libx264", 1, 83},
		{"audiolong", "libsvtav1", 0.8, 50},
		{"audioshort", "libx264", 1, 75},
		{"noaudio", "libx265", 0.8, 50},
		{"mkv", "libx264", 1, 90},
		{"ts", "libvpx-vp9", 1, 75},
		{"rotated", "libx265", 1, 75},
		// 10-bit kept, as the user asks.
		{"10bit", "libx265", 1, 75},
		{"10bit", "libsvtav1", 1, 75},
	}
	for _, c := range cases {
		t.Run(c.source+"/"+c.encoder, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			needEncoder(t, r.ffmpeg, c.encoder)
			r.makeSource(c.source)
			e := encoders[c.encoder]
			vf := "-vf scale=96:-2,format=yuv420p"
			if c.source == "10bit" {
				vf = "-vf scale=96:-2 -pix_fmt yuv420p10le"
			}
			rep, chunks := r.chunked("-i inputs/"+srcFile(c.source)+" "+vf+" "+e.args+" outputs/"+e.out, c.chunkSeconds, nil)
			r.mustPass(rep, chunks, c.frames)
			switch c.source {
			case "10bit":
				if pf := r.videoInfo("outputs/" + e.out).PixFmt; pf != "yuv420p10le" {
					t.Errorf("the output's pixel format is %s, want yuv420p10le", pf)
				}
			case "rotated":
				if v := r.videoInfo("outputs/" + e.out); v.Width != 96 || v.Height != 128 || v.Rotation != 0 {
					t.Errorf("the output is %+v, want 96x128 with no rotation left (as ffmpeg's autorotation)", v)
				}
			}
			switch c.source {
			case "tail":
				if last := chunks[len(chunks)-1]; last.Frames != 8 {
					t.Errorf("the last chunk holds %d frames, want 8: %+v", last.Frames, chunks)
				}
			case "opengop":
				open := false
				for _, ch := range chunks[:len(chunks)-1] {
					open = open || ch.FirstPacket+ch.Packets > chunks[ch.Index+1].FirstPacket
				}
				if !open {
					t.Errorf("no chunk carries the next one's leading pictures: is the source open-GOP? %+v", chunks)
				}
			case "noaudio":
				if rep.AV != nil {
					t.Errorf("an A/V check without audio: %+v", rep.AV)
				}
			default:
				if rep.AV == nil || !rep.AV.OK {
					t.Errorf("A/V check %+v", rep.AV)
				}
			}
			t.Logf("%d chunks, report %s", len(chunks), rep.JSON())
		})
	}
}

// Verify proves the file wrong when it is: a chunk encoded a frame short (its
// trim ends one frame early) leaves the stitched file a frame short, and every
// frame after it a frame early.
func TestVerifyCatchesAMissingFrame(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.makeSource("cfr25")
	rep, _ := r.chunked("-i inputs/src.mp4 -c:v libx264 -preset veryfast -c:a aac outputs/out.mp4", 1, func(c []Chunk) {
		c[0].TrimTo -= 0.04
	})
	if rep.Pass {
		t.Fatalf("verification passed a file a frame short: %s", rep.JSON())
	}
	joined := strings.Join(rep.Failures, "\n")
	for _, want := range []string{"the stitched video has 74 frames, the plan 75", "chunk 0 decodes to 23 frames, the plan 24", "timestamps differ from the source's: frame 23"} {
		if !strings.Contains(joined, want) {
			t.Errorf("failures %q, want %q among them", joined, want)
		}
	}
}

// The chunks' hashes come from their encode jobs: one that disagrees with
// the stitched file's decode (a frame's hash changed, as a chunk decoded
// otherwise than in the stitched file would give), one that is missing, and
// one of another hash fail the verification, naming their chunks, with
// every file right.
func TestVerifyChecksTheEncodesHashes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.makeSource("cfr25")
	rep, chunks := r.chunkedHashes("-i inputs/src.mp4 -c:v libx264 -preset veryfast -c:a aac outputs/out.mp4", 1, nil, func(h []*ChunkHashes) {
		if len(h) < 3 {
			t.Fatalf("%d chunks, want 3", len(h))
		}
		f := h[1].Frames
		f[5] = strings.Repeat("0", len(f[5]))
		h[0] = nil
		h[2].Hash = "md5"
	})
	if rep.Pass {
		t.Fatalf("verification passed with a chunk's hashes wrong: %s", rep.JSON())
	}
	joined := strings.Join(rep.Failures, "\n")
	for _, want := range []string{
		fmt.Sprintf("chunk 1 decoded alone differs from the stitched file's frames %d to %d", chunks[0].Frames, chunks[0].Frames+chunks[1].Frames-1),
		"chunk 0 has no frame hashes from its encode to check",
		`chunk 2's frame hashes are "md5", not ` + FrameHash,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("failures %q, want %q among them", joined, want)
		}
	}
	// Nothing else: the file itself is right.
	if len(rep.Failures) != 3 || rep.Chunks[1].HashesMatch || !rep.Decode.Clean || rep.DecodedFrames != 75 {
		t.Errorf("failures %q, report %s; want the three above only", joined, rep.JSON())
	}
}

// The stitch decodes the stitched file only across its seams when its
// packets are the chunks': fewer frames than the file holds, each window
// compared with the chunks decoded alone (a hash changed there fails, naming
// the frame). A byte changed in a packet far from any seam makes the packets
// differ, so the whole file is decoded, and the damage is found. An output
// whose container frames the packets otherwise (H.264 in MPEG-TS) is decoded
// whole, and passes.
func TestVerifyDecodesOnlyTheSeams(t *testing.T) {
	t.Parallel()
	const userCmd = "-i inputs/src.mp4 -vf scale=96:-2 -c:v libx264 -preset veryfast -g 25 -c:a aac outputs/out.mp4"
	t.Run("seams", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		rep, chunks := r.chunked(userCmd, 4, nil)
		r.mustPass(rep, chunks, 250)
		// Two seams, each decoded from the keyframe before it (one every 25
		// frames) to DecodeWindow frames past it.
		if len(chunks) != 3 || rep.Decode.Frames > 2*(25+DecodeWindow) || rep.Decode.Frames < 2*DecodeWindow || rep.Decode.FullReason != "" {
			t.Fatalf("%d chunks, decode %+v: want the seams alone decoded", len(chunks), rep.Decode)
		}
	})
	t.Run("a hash in a seam's window", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		var first int
		rep, chunks := r.chunkedHashes(userCmd, 4, nil, func(h []*ChunkHashes) {
			first = len(h[0].Frames)
			h[1].Frames[3] = strings.Repeat("0", len(h[1].Frames[3]))
		})
		want := fmt.Sprintf("chunk 1 decoded alone differs from the stitched file's frame %d, decoded across the seam before chunk 1", first+3)
		if rep.Pass || len(rep.Failures) != 1 || rep.Failures[0] != want || rep.Decode.Mode != DecodeSeams {
			t.Fatalf("failures %q, decode %+v; want only %q (%+v)", rep.Failures, rep.Decode, want, chunks)
		}
	})
	// x264's default GOP (250) is longer than a chunk here: each seam's
	// window starts at the chunk before's first frame, and the two windows
	// are one decode across both seams, each frame compared.
	t.Run("one keyframe per chunk", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		var first int
		rep, chunks := r.chunkedHashes(strings.Replace(userCmd, " -g 25", "", 1), 4, nil, func(h []*ChunkHashes) {
			first = len(h[0].Frames)
			h[1].Frames[3] = strings.Repeat("0", len(h[1].Frames[3]))
		})
		want := fmt.Sprintf("chunk 1 decoded alone differs from the stitched file's frame %d, decoded across the seam before chunk 1", first+3)
		if rep.Pass || len(rep.Failures) != 1 || rep.Failures[0] != want || rep.Decode.Mode != DecodeSeams || rep.Decode.Frames != 250-50+DecodeWindow {
			t.Fatalf("failures %q, decode %+v; want only %q, the first two chunks and %d frames past the second seam decoded once (%+v)", rep.Failures, rep.Decode, want, DecodeWindow, chunks)
		}
	})
	// Matroska: ffmpeg seeks it a little before the time asked when the
	// video has B-frames, landing on an earlier keyframe; the window still
	// ends where it should.
	t.Run("Matroska output with B-frames", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		rep, chunks := r.chunked(strings.Replace(userCmd, "out.mp4", "out.mkv", 1), 4, nil)
		r.mustPass(rep, chunks, 250)
		// Each window from the keyframe before its seam, not the one before
		// that (where ffmpeg's own seek would land).
		if rep.Decode.Frames > 2*(25+DecodeWindow) {
			t.Fatalf("decode %+v: want each seam decoded from the keyframe before it", rep.Decode)
		}
	})
	// A stitched file whose edit list hides its first frames: the packets
	// are the chunks', but the decoder drops some; only a whole decode counts
	// what it shows.
	t.Run("frames an edit list hides", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		r.afterStitch = func(path string) {
			cut := filepath.Join(filepath.Dir(path), "cut.mp4")
			r.run("-y", "-ss", "0.2", "-i", path, "-map", "0", "-c", "copy", cut)
			if err := os.Rename(cut, path); err != nil {
				t.Fatal(err)
			}
		}
		rep, _ := r.chunked(userCmd, 4, nil)
		if rep.Pass || rep.Decode.Mode != DecodeFull || !strings.Contains(rep.Decode.FullReason, "edit list") {
			t.Fatalf("verification of a file whose edit list hides frames: %s", rep.JSON())
		}
	})
	t.Run("a byte changed far from the seams", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		r.afterStitch = func(path string) {
			// Frame 150, in the middle of chunk 1 (frames 100 to 199), outside
			// both windows: a byte in the middle of its packet.
			pos, size := r.packetAt(path, 150)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[pos+size/2] ^= 0x55
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		rep, _ := r.chunked(userCmd, 4, nil)
		if rep.Pass || rep.Decode.Mode != DecodeFull || !strings.Contains(rep.Decode.FullReason, "chunk 1's packets differ") ||
			rep.Chunks[1].PacketsMatch || !rep.Chunks[0].PacketsMatch || rep.Chunks[1].HashesMatch {
			t.Fatalf("verification of a changed packet: %s", rep.JSON())
		}
	})
	t.Run("MPEG-TS output", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		r.makeSource("long")
		rep, chunks := r.chunked(strings.Replace(userCmd, "out.mp4", "out.ts", 1), 4, nil)
		if !rep.Pass || rep.Decode.Mode != DecodeFull || rep.Decode.Frames != 250 || rep.DecodedFrames != 250 || rep.Decode.FullReason == "" {
			t.Fatalf("verification of an MPEG-TS output (%+v): %s", chunks, rep.JSON())
		}
	})
}

// packetAt is the byte position and size of the video packet shown n-th in
// path.
func (r *rig) packetAt(path string, n int) (pos, size int) {
	r.t.Helper()
	out, err := exec.CommandContext(r.ctx, r.ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts,pos,size", "-of", "csv=p=0", path).Output()
	if err != nil {
		r.t.Fatal(err)
	}
	type pkt struct{ pts, pos, size int }
	var pkts []pkt
	for _, l := range strings.Fields(string(out)) {
		var p pkt
		if _, err := fmt.Sscanf(l, "%d,%d,%d", &p.pts, &p.size, &p.pos); err != nil {
			r.t.Fatalf("ffprobe line %q: %v", l, err)
		}
		pkts = append(pkts, p)
	}
	sort.Slice(pkts, func(i, j int) bool { return pkts[i].pts < pkts[j].pts })
	if n >= len(pkts) {
		r.t.Fatalf("%d packets, want frame %d", len(pkts), n)
	}
	return pkts[n].pos, pkts[n].size
}

// An open GOP's keyframe is followed in decode order by pictures shown before
// it: cut there without giving them (and the keyframe) to the chunk before, as
// a segmenting split would, and that chunk is short of frames. The plan's
// overlap is what makes the open-GOP case of TestChunkedEndToEnd pass.
func TestOpenGOPNeedsTheLeadingPictures(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.makeSource("opengop")
	rep, _ := r.chunked("-i inputs/src.mp4 -c:v libx264 -preset veryfast -c:a aac outputs/out.mp4", 1, func(c []Chunk) {
		for i := range c[:len(c)-1] {
			c[i].Packets = c[i+1].FirstPacket - c[i].FirstPacket
		}
	})
	if rep.Pass {
		t.Fatalf("verification passed a split without the leading pictures: %s", rep.JSON())
	}
	if joined := strings.Join(rep.Failures, "\n"); !strings.Contains(joined, "chunk 0 decodes to") {
		t.Errorf("failures %q, want chunk 0 short of frames", joined)
	}
}

// Probe refuses a source whose timestamps cannot be planned on: two
// transport-stream captures joined byte for byte, whose clock restarts.
func TestProbeRefusesBrokenTimestamps(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.run(append(cat(video("25", "1"), x264(5)), "-f", "mpegts", "inputs/part.ts")...)
	part, err := os.ReadFile(filepath.Join(r.dir, "inputs/part.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "inputs/broken.ts"), append(part, part...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Probe(r.ctx, r.ffprobe, filepath.Join(r.dir, "inputs/part.ts")); err != nil {
		t.Fatalf("Probe(one part) = %v, want nil", err)
	}
	// Local files only: a path that names another protocol is not opened.
	concat := "concat:" + filepath.Join(r.dir, "inputs/part.ts") + "|" + filepath.Join(r.dir, "inputs/part.ts")
	if _, err := Probe(r.ctx, r.ffprobe, concat); err == nil || !strings.Contains(err.Error(), "whitelist") {
		t.Fatalf("Probe(%s) = %v, want a refusal of the concat protocol", concat, err)
	}
	_, err = Probe(r.ctx, r.ffprobe, filepath.Join(r.dir, "inputs/broken.ts"))
	if err == nil || !strings.Contains(err.Error(), "broken timestamps") {
		t.Fatalf("Probe = %v, want a refusal naming broken timestamps", err)
	}
	t.Log(err)
}

// probeStreams reads path's streams and format (no packets).
func probeStreams(ctx context.Context, ffprobe, path string) (*probeOut, error) {
	out, err := run(ctx, ffprobe, "-v", "error", "-protocol_whitelist", "file", "-show_entries",
		"stream=index,codec_type,codec_name,time_base,start_time,duration:format=start_time,duration", "-of", "json", path)
	if err != nil {
		return nil, fmt.Errorf("probing %s: %w", path, err)
	}
	var p probeOut
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("probing %s: %w", path, err)
	}
	return &p, nil
}
