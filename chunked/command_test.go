package chunked

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/command"
)

var testSpec = command.Spec{
	Inputs:  map[string]bool{"src.mp4": true, "src.mkv": true, "src.ts": true, "logo.png": true, "subs.srt": true, "title.txt": true},
	Outputs: map[string]bool{"out.mp4": true, "out.webm": true, "out.mkv": true, "out.ts": true, "out.m3u8": true, "seg_%03d.ts": true, "f%04d.png": true},
}

// prepare runs the service's command checker first, as the gateway does.
func prepare(t *testing.T, cmd string) []string {
	t.Helper()
	argv, err := command.Prepare(cmd, testSpec)
	if err != nil {
		t.Fatalf("command.Prepare(%q): %v", cmd, err)
	}
	return argv
}

func TestCheckAccepts(t *testing.T) {
	for _, cmd := range []string{
		"-i inputs/src.mp4 -c:v libx264 -crf 23 -preset veryfast -c:a aac -b:a 128k -movflags +faststart outputs/out.mp4",
		"-y -hide_banner -i inputs/src.mp4 -vf scale=-2:720,format=yuv420p -c:v libx265 -x265-params open-gop=1 -tag:v hvc1 outputs/out.mp4",
		"-i inputs/src.mp4 -map 0:v:0 -map 0:a? -c:v libsvtav1 -preset 8 -crf 35 -c:a copy outputs/out.mp4",
		"-i inputs/src.mp4 -c:v libvpx-vp9 -b:v 0 -crf 33 -c:a libopus outputs/out.webm",
		"-i inputs/src.mp4 -vcodec libx264 -vf setpts=PTS-STARTPTS -af afade=t=in:st=0:d=1 outputs/out.mp4",
		"-i inputs/src.mp4 -c:v libx264 -vf \"drawtext=text='hello':x=10:y=10:fontcolor=white,eq=gamma=1.2\" outputs/out.mp4",
		"-i inputs/src.mp4 -c:v libx264 -vf [in]split[a][b];[a]hflip[l];[l][b]hstack[out] outputs/out.mp4",
		"-i inputs/src.mp4 -c:v libx264 -force_key_frames 0,2,4 -fps_mode passthrough -metadata title=x outputs/out.mp4",
		"-i inputs/src.mp4 -map 0 -c copy -c:v libx264 -c:s mov_text outputs/out.mp4",
	} {
		if err := Check(prepare(t, cmd)); err != nil {
			t.Errorf("Check(%q) = %v, want nil", cmd, err)
		}
	}
}

func TestCheckRefuses(t *testing.T) {
	for _, tc := range []struct{ cmd, what, why string }{
		{"-i inputs/src.mp4 -vf fade=t=in:st=0:d=1 -c:v libx264 outputs/out.mp4", "filter fade=t=in:st=0:d=1", "each chunk would fade at its own start"},
		{"-i inputs/src.mp4 -vf trim=start=1:end=3 -c:v libx264 outputs/out.mp4", "filter trim=start=1:end=3", "cuts by time"},
		{"-i inputs/src.mp4 -vf setpts=0.5*PTS -c:v libx264 outputs/out.mp4", "filter setpts=0.5*PTS", "only PTS-STARTPTS is safe"},
		{"-i inputs/src.mp4 -vf setpts=N/FRAME_RATE/TB -c:v libx264 outputs/out.mp4", "filter setpts=N/FRAME_RATE/TB", "restart in each chunk"},
		{"-i inputs/src.mp4 -vf minterpolate=fps=60 -c:v libx264 outputs/out.mp4", "filter minterpolate=fps=60", "interpolates"},
		{"-i inputs/src.mp4 -vf tmix=frames=3 -c:v libx264 outputs/out.mp4", "filter tmix=frames=3", "neighbours"},
		{"-i inputs/src.mp4 -vf tblend -c:v libx264 outputs/out.mp4", "filter tblend", "the one before"},
		{"-i inputs/src.mp4 -vf \"select='gt(scene,0.4)'\" -c:v libx264 outputs/out.mp4", "filter select=gt(scene,0.4)", "restarts in each chunk"},
		{"-i inputs/src.mp4 -vf \"select='not(mod(n,2))'\" -c:v libx264 outputs/out.mp4", "filter select", "frame numbers"},
		{"-i inputs/src.mp4 -vf loop=loop=2:size=10 -c:v libx264 outputs/out.mp4", "filter loop", "whole timeline"},
		{"-i inputs/src.mp4 -vf reverse -c:v libx264 outputs/out.mp4", "filter reverse", "whole timeline"},
		{"-i inputs/src.mp4 -vf bwdif -c:v libx264 outputs/out.mp4", "filter bwdif", "a frame per field"},
		{"-i inputs/src.mp4 -vf yadif=1 -c:v libx264 outputs/out.mp4", "filter yadif=1", "doubling the frame rate"},
		{"-i inputs/src.mp4 -vf \"yadif=enable='gt(t,1)'\" -c:v libx264 outputs/out.mp4", "filter yadif", "timeline expression"},
		{"-i inputs/src.mp4 -vf [x]yadif[y];hflip[x] -c:v libx264 outputs/out.mp4", "-vf [x]yadif[y];hflip[x]", "cannot find the graph's output"},
		{"-i inputs/src.mp4 -vf hqdn3d -c:v libx264 outputs/out.mp4", "filter hqdn3d", "a reach without bound"},
		{"-i inputs/src.mp4 -vf w3fdif -c:v libx264 outputs/out.mp4", "filter w3fdif", "not yet proven exact"},
		{"-i inputs/src.mp4 -vf fps=30 -c:v libx264 outputs/out.mp4", "filter fps=30", "from its own start"},
		{"-i inputs/src.mp4 -vf hue=h=90*t -c:v libx264 outputs/out.mp4", "filter hue=h=90*t", `uses "t"`},
		{"-i inputs/src.mp4 -vf \"drawtext=text='%{pts}':x=10\" -c:v libx264 outputs/out.mp4", "filter drawtext", "%{pts}"},
		{"-i inputs/src.mp4 -vf \"hflip=enable='between(t,1,2)'\" -c:v libx264 outputs/out.mp4", "filter hflip", "timeline expression"},
		{"-i inputs/src.mp4 -vf \"movie=inputs/logo.png[l];[in][l]overlay\" -c:v libx264 outputs/out.mp4", "filter movie=inputs/logo.png", "second timeline"},
		{"-i inputs/src.mp4 -vf frobnicate -c:v libx264 outputs/out.mp4", "filter frobnicate", "not known to be frame-independent"},
		{"-i inputs/src.mp4 -i inputs/logo.png -filter_complex overlay -c:v libx264 outputs/out.mp4", "-i inputs/logo.png", "second input"},
		{"-i inputs/src.mp4 -filter_complex [0:v]scale=640:-2[v] -map [v] -c:v libx264 outputs/out.mp4", "-filter_complex", "write a graph over the one video stream as -vf"},
		{"-i inputs/src.mp4 -ss 10 -c:v libx264 outputs/out.mp4", "-ss 10", "each chunk would skip its own first 10 s"},
		{"-i inputs/src.mp4 -t 5 -c:v libx264 outputs/out.mp4", "-t 5", "each chunk would stop 5 s after its own start"},
		{"-i inputs/src.mp4 -to 5 -c:v libx264 outputs/out.mp4", "-to 5", "stops the encode at a time"},
		{"-i inputs/src.mp4 -frames:v 100 -c:v libx264 outputs/out.mp4", "-frames:v 100", "each chunk would stop after its own 100"},
		{"-i inputs/src.mp4 -vframes 100 -c:v libx264 outputs/out.mp4", "-vframes 100", "each chunk would stop"},
		{"-ss 10 -i inputs/src.mp4 -c:v libx264 outputs/out.mp4", "-ss 10", "on the input starts the encode"},
		{"-i inputs/src.mp4 -c:v libx264 -f hls -hls_time 4 outputs/out.m3u8", "-f hls", "HLS segments"},
		{"-i inputs/src.mp4 -c:v libx264 -f segment -segment_time 4 outputs/seg_%03d.ts", "-f segment", "segments by time"},
		{"-i inputs/src.mp4 -c:v libx264 -f dash outputs/out.mp4", "-f dash", "DASH"},
		{"-i inputs/src.mp4 -c:v libx264 -b:v 2M -pass 1 outputs/out.mp4", "-pass 1", "two-pass"},
		{"-i inputs/src.mp4 -c:v libx265 -x265-params pass=2 outputs/out.mp4", "-x265-params pass=2", "two-pass"},
		{"-i inputs/src.mp4 -c:v libx264 -r 30 outputs/out.mp4", "-r 30", "converts the frame rate"},
		{"-i inputs/src.mp4 -c:v libx264 -shortest outputs/out.mp4", "-shortest", "shortest stream"},
		{"-i inputs/src.mp4 -c:v libx264 -force_key_frames expr:gte(t,n_forced*2) outputs/out.mp4", "-force_key_frames", "restart in each chunk"},
		{"-i inputs/src.mp4 -c:v libx264 outputs/f%04d.png", "output \"outputs/f%04d.png\"", "numbered"},
		{"-i inputs/src.mp4 -c:v mpeg4 outputs/out.mp4", "-c:v mpeg4", "libx264, libx265, libsvtav1, libvpx-vp9"},
		{"-i inputs/src.mp4 -c copy outputs/out.mp4", "-c:v copy", "nothing to encode"},
		{"-i inputs/src.mp4 outputs/out.mp4", "the command", "names no video encoder"},
		{"-i inputs/src.mp4 -map 0:v:1 -c:v libx264 outputs/out.mp4", "-map 0:v:1", "other than the first"},
		{"-f lavfi -i testsrc2 -c:v libx264 outputs/out.mp4", "-f lavfi", "generated input"},
		{"-i inputs/src.mp4 -c:v libx264 outputs/out.mp4 -c:v libx265 outputs/out.webm", "output \"outputs/out.webm\"", "second output"},
		{"-i inputs/src.mp4 -c:v libx264 -fps_mode cfr outputs/out.mp4", "-fps_mode cfr", "constant rate"},
		{"-copyts -i inputs/src.mp4 -c:v libx264 outputs/out.mp4", "-copyts", "keeps the source's timestamps itself"},
	} {
		wantRefusal(t, tc.cmd, tc.what, tc.why)
	}
}

// Constructs whose result for a frame depends on state carried from frame to
// frame, on a frame count, or that the chunks' encodes would silently drop:
// each was accepted before this test, and each yields another output in
// chunks than in one encode (vignette's dither, random()/st()/ld() and a
// branch re-timed with STARTPTS measured so: frames 50..99 filtered alone
// differ from the same frames filtered after 0..49).
func TestCheckRefusesHiddenState(t *testing.T) {
	const in = "-i inputs/src.mp4 "
	const out = " -c:v libx264 outputs/out.mp4"
	for _, tc := range []struct{ cmd, what, why string }{
		// vignette dithers with a sequence carried over frames (on by default).
		{in + "-vf vignette" + out, "filter vignette", "add dither=0"},
		{in + "-vf vignette=PI/4:dither=1" + out, "filter vignette", "carried from frame to frame"},
		// Expression functions with state over evaluations.
		{in + "-vf hue=h=random(0)*360" + out, "filter hue", "uses random()"},
		{in + "-vf \"hue=h='st(0,ld(0)+10)'\"" + out, "filter hue", "uses st()"},
		{in + "-vf \"eq=gamma='1+ld(1)'\"" + out, "filter eq", "uses ld()"},
		{in + "-vf \"geq=lum='random(1)*255':cb=128:cr=128\"" + out, "filter geq", "uses random()"},
		{in + "-vf \"overlay=x='random(0)*10'\"" + out, "filter overlay", "uses random()"},
		// drawtext: positions in the file, expansions, files, the clock.
		{in + "-vf drawtext=text=x:x=pkt_pos/100" + out, "filter drawtext", `uses "pkt_pos"`},
		{in + "-vf \"drawtext=text='%{e\\:random(0)}'\"" + out, "filter drawtext", "%{e:...} uses random()"},
		{in + "-vf \"drawtext=text='%{frame_num}'\"" + out, "filter drawtext", "expands %{frame_num}"},
		{in + "-vf \"drawtext=text='%{gmtime}'\"" + out, "filter drawtext", "expands %{gmtime}"},
		{in + "-vf \"drawtext=fontcolor_expr='%{e\\:random(0)}'\"" + out, "filter drawtext", "uses random()"},
		{in + "-vf drawtext=textfile=inputs/title.txt" + out, "filter drawtext", "expansion=none"},
		{in + "-vf \"drawtext=expansion=strftime:text='%S'\"" + out, "filter drawtext", "strftime"},
		// A branch re-timed by the chunk's own start meets the other at other frames.
		{in + "-vf \"split[a][b];[b]setpts=PTS-STARTPTS[c];[a][c]overlay=x=20\"" + out, "filter setpts=PTS-STARTPTS", "a graph that splits them"},
		{in + "-vf \"split[a][b];[a]setpts=PTS-STARTPTS[c];[c][b]hstack\"" + out, "filter setpts=PTS-STARTPTS", "a graph that splits them"},
		// uspp codes with an internal encoder whose GOP never ends.
		{in + "-vf uspp" + out, "filter uspp", "GOP never ends"},
		// A video filter or frame rate by stream index: the chunks' encodes
		// take -vf/-filter:v alone, and would drop it.
		{in + "-filter:0 fade=in:0:25" + out, "-filter:0", "by index or property"},
		{in + "-filter:0 hflip" + out, "-filter:0", "-vf or -filter:v"},
		{in + "-r:0 10" + out, "-r:0 10", "converts the frame rate"},
		{in + "-fpsmax:0 10" + out, "-fpsmax:0 10", "converts the frame rate"},
		// Encoder parameters by frame number or over the whole file.
		{in + "-c:v libx264 -x264-params zones=0,50,crf=5 outputs/out.mp4", "-x264-params zones=0,50,crf=5", "ranges of frame numbers"},
		{in + "-c:v libx264 -x264opts frames=10 outputs/out.mp4", "-x264opts frames=10", "number of frames"},
		{in + "-c:v libx265 -x265-params zones=0,50,q=5 outputs/out.mp4", "-x265-params", "ranges of frame numbers"},
		{in + "-c:v libx265 -x265-params qpfile=inputs/title.txt outputs/out.mp4", "-x265-params", "by frame number"},
		{in + "-c:v libx265 -x265-params chunk-start=10:chunk-end=20 outputs/out.mp4", "-x265-params", "frame number"},
		{in + "-c:v libx265 -x265-params dhdr10-info=inputs/title.txt outputs/out.mp4", "-x265-params", "per frame number"},
		{in + "-c:v libx265 -x265-params vbv-end=0.5 outputs/out.mp4", "-x265-params", "last frames"},
		{in + "-c:v libsvtav1 -svtav1-params passes=2 outputs/out.mp4", "-svtav1-params passes=2", "two-pass"},
		// Bitstream filters over packet numbers, times or at random.
		{in + "-c:v libx264 -bsf:v setts=ts=N outputs/out.mp4", "-bsf:v setts=ts=N", "packet numbers"},
		{in + "-c:v libx264 -bsf:v h264_metadata,noise=10 outputs/out.mp4", "-bsf:v", "bitstream filter noise"},
		{in + "-c:v libx264 -bsf noise=10 outputs/out.mp4", "-bsf noise=10", "at random"},
		// The encoder's time base, which the chunks' encodes set themselves.
		{in + "-c:v libx264 -enc_time_base 1/10 outputs/out.mp4", "-enc_time_base 1/10", "would be dropped"},
		// Packets dropped at demuxing, which the plan counted.
		{"-discard:v nokey " + in + "-c:v libx264 outputs/out.mp4", "-discard:v nokey", "the plan counts"},
	} {
		wantRefusal(t, tc.cmd, tc.what, tc.why)
	}
	// Their frame-local forms stay accepted.
	for _, cmd := range []string{
		in + "-vf vignette=dither=0" + out,
		in + "-vf \"drawtext=text='%{pict_type} %{metadata\\:lavfi.x}'\"" + out,
		in + "-vf drawtext=textfile=inputs/title.txt:expansion=none" + out,
		in + "-vf \"split[a][b];[a]setpts=PTS[c];[c][b]hstack\"" + out,
		in + "-vf setpts=PTS-STARTPTS,hflip" + out,
		in + "-vf hue=s=0,eq=contrast=1.1" + out,
		in + "-c:v libx264 -bsf:v h264_metadata=video_full_range_flag=0 outputs/out.mp4",
		in + "-c:v libx264 -x264-params keyint=50:min-keyint=25 outputs/out.mp4",
		in + "-filter:a volume=0.5" + out,
		"-skip_loop_filter all " + in + "-c:v libx264 outputs/out.mp4",
		in + "-c:v libx264 -enc_time_base -1 outputs/out.mp4",
	} {
		if err := Check(prepare(t, cmd)); err != nil {
			t.Errorf("Check(%q) = %v, want nil", cmd, err)
		}
	}
}

// Decoder options that change the pictures belong to the chunk's decode: the
// split's stream copy ignores them, so left there the chunks would be decoded
// without them and differ from one encode (-skip_loop_filter was dropped so).
func TestEncodeKeepsDecoderOptions(t *testing.T) {
	cmd, err := Parse(prepare(t, "-skip_loop_filter all -skip_idct nonref -i inputs/src.mp4 -c:v libx264 outputs/out.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	c := Chunk{Index: 1, Start: 2, End: 4, Frames: 50, FirstPacket: 50, Packets: 52, TrimFrom: 1.98, TrimTo: 3.98}
	enc := strings.Join(EncodeArgs(cmd, c, "inputs/chunk.nut", "outputs/enc.nut"), " ")
	for _, want := range []string{"-skip_loop_filter all -skip_idct nonref -i inputs/chunk.nut"} {
		if !strings.Contains(enc, want) {
			t.Errorf("EncodeArgs = %s, want %q in it", enc, want)
		}
	}
	src := &Source{Path: "inputs/src.mp4"}
	if split := strings.Join(SplitArgs(src, cmd, c, "outputs/chunk.nut"), " "); strings.Contains(split, "skip_") {
		t.Errorf("SplitArgs = %s, want no decoder options (a stream copy ignores them)", split)
	}
}

func TestMergeParams(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"", "open-gop=0"},
		{"open_gop=1:log-level=error", "log-level=error:open-gop=0"},
		{"no-open-gop:keyint=48", "keyint=48:open-gop=0"},
	} {
		if got := mergeParams(tc.list, "open-gop", "0"); got != tc.want {
			t.Errorf("mergeParams(%q) = %q, want %q", tc.list, got, tc.want)
		}
	}
}

// The steps' commands are ordinary job commands: the service's checker must
// let them through (paths as a step's job names them).
func TestStepsPassTheChecker(t *testing.T) {
	cmd, err := Parse(prepare(t, "-i inputs/src.mp4 -vf scale=64:-2 -c:v libx264 -x264-params keyint=50 -c:a aac -movflags +faststart -tag:v avc1 outputs/out.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	src := &Source{Path: "inputs/src.mp4", VideoIndex: 0, Start: 0, End: 4, FormatStart: 0}
	c := Chunk{Index: 1, Start: 2, End: 4, Frames: 50, Last: false, FirstPacket: 50, Packets: 52, TrimFrom: 1.98, TrimTo: 3.98}
	spec := command.Spec{
		Inputs:  map[string]bool{"src.mp4": true, "chunk.nut": true, "list.txt": true, "aux.mp4": true},
		Outputs: map[string]bool{"chunk.nut": true, "enc.nut": true, "aux.mp4": true, "out.mp4": true},
	}
	for _, argv := range [][]string{
		SplitArgs(src, cmd, c, "outputs/chunk.nut"),
		EncodeArgs(cmd, c, "inputs/chunk.nut", "outputs/enc.nut"),
		AuxArgs(cmd, "outputs/aux.mp4"),
		StitchArgs(src, cmd, "inputs/list.txt", "inputs/aux.mp4"),
	} {
		if _, err := command.Prepare(shellJoin(argv), spec); err != nil {
			t.Errorf("%q: %v", argv, err)
		}
	}
	enc := strings.Join(EncodeArgs(cmd, c, "inputs/chunk.nut", "outputs/enc.nut"), " ")
	for _, want := range []string{"-copyts", "-filter:v trim=start=1.980000:end=3.980000,scale=64:-2", "-an -sn -dn", "-x264-params keyint=50:open-gop=0", "-f nut outputs/enc.nut"} {
		if !strings.Contains(enc, want) {
			t.Errorf("EncodeArgs = %s, want %q in it", enc, want)
		}
	}
	for _, bad := range []string{"movflags", "-c:a", "tag:v"} {
		if strings.Contains(enc, bad) {
			t.Errorf("EncodeArgs = %s, want no %q (the stitch's or the aux step's)", enc, bad)
		}
	}
	st := strings.Join(StitchArgs(src, cmd, "inputs/list.txt", "inputs/aux.mp4"), " ")
	for _, want := range []string{"-movflags +faststart", "-tag:v avc1", "-c copy", "-map 1"} {
		if !strings.Contains(st, want) {
			t.Errorf("StitchArgs = %s, want %q in it", st, want)
		}
	}
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, w := range argv {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Chunked encoding encodes one video stream; the aux step drops the others
// (-vn). A command that one encode would give another video stream (a second
// angle, cover art under -map 0) is refused once the plan has probed the source.
func TestCheckSourceOtherVideoStreams(t *testing.T) {
	r := newRig(t)
	r.run("-y", "-f", "lavfi", "-i", "testsrc2=s=96x64:r=25:d=1", "-f", "lavfi", "-i", "testsrc=s=128x96:r=25:d=1",
		"-map", "0", "-map", "1", "-c:v", "libx264", "inputs/two.mkv")
	r.run("-y", "-f", "lavfi", "-i", "color=red:s=128x96:d=1", "-frames:v", "1", "inputs/cover.png")
	r.run("-y", "-f", "lavfi", "-i", "testsrc2=s=96x64:r=25:d=1", "-i", "inputs/cover.png",
		"-map", "0", "-map", "1", "-c:v:0", "libx264", "-c:v:1", "png", "-disposition:v:1", "attached_pic", "inputs/cover.mp4")
	spec := command.Spec{Inputs: map[string]bool{"two.mkv": true, "cover.mp4": true}, Outputs: map[string]bool{"out.mp4": true}}
	for _, tc := range []struct{ src, cmd, what string }{
		{"two.mkv", "-i inputs/two.mkv -c:v libx264 outputs/out.mp4", "the source"},
		{"two.mkv", "-i inputs/two.mkv -map 0 -c:v libx264 outputs/out.mp4", "-map 0"},
		{"two.mkv", "-i inputs/two.mkv -map 0:V -c:v libx264 outputs/out.mp4", "-map 0:V"},
		{"two.mkv", "-i inputs/two.mkv -map 0:v:0 -map 0:1 -c:v libx264 outputs/out.mp4", "-map 0:1"},
		{"cover.mp4", "-i inputs/cover.mp4 -map 0 -c:v libx264 outputs/out.mp4", "-map 0"},
		{"cover.mp4", "-i inputs/cover.mp4 -map 0:v -c:v libx264 outputs/out.mp4", "-map 0:v"},
		{"cover.mp4", "-i inputs/cover.mp4 -map 0:V -c:v libx264 outputs/out.mp4", ""},
		{"cover.mp4", "-i inputs/cover.mp4 -c:v libx264 outputs/out.mp4", ""},
		{"two.mkv", "-i inputs/two.mkv -map 0:v:0 -c:v libx264 outputs/out.mp4", ""},
	} {
		src, err := Probe(r.ctx, r.ffprobe, filepath.Join(r.dir, "inputs", tc.src))
		if err != nil {
			t.Fatal(err)
		}
		argv, err := command.Prepare(tc.cmd, spec)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := Parse(argv)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.cmd, err)
		}
		err = cmd.CheckSource(src)
		var rf *Refusal
		switch {
		case tc.what == "" && err != nil:
			t.Errorf("%s: CheckSource = %v, want nil", tc.cmd, err)
		case tc.what != "" && (!errors.As(err, &rf) || rf.What != tc.what || !strings.Contains(rf.Why, "one video stream")):
			t.Errorf("%s: CheckSource = %v, want a refusal of %q", tc.cmd, err, tc.what)
		}
	}
}

// wantRefusal fails unless Check refuses cmd naming what, saying why.
func wantRefusal(t *testing.T, cmd, what, why string) {
	t.Helper()
	err := Check(prepare(t, cmd))
	var r *Refusal
	if !errors.As(err, &r) {
		t.Errorf("Check(%q) = %v, want a refusal", cmd, err)
		return
	}
	if !strings.Contains(r.What, what) || !strings.Contains(r.Why, why) {
		t.Errorf("Check(%q) = %q, want what %q and why containing %q", cmd, err, what, why)
	}
}
