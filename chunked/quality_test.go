package chunked

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/command"
)

// A source encoded in chunks and in one go with the same x264 CRF command:
// the quality report has both encodes' scores against the source, close to
// each other, a window per seam, worst frames within the source's frames,
// and says whether VMAF was measured. The scaled case compares an encode
// the command scaled down, scaled back to the source's size; the VFR one
// pairs frames on a 1/90000 time base against the encodes' own.
func TestQualityAgainstASinglePassEncode(t *testing.T) {
	for _, c := range []struct {
		name, source, vf string
		frames           int
	}{
		{"cfr25", "cfr25", "", 75},
		{"scaled", "cfr25", " -vf scale=96:-2", 75},
		{"vfr", "vfr", "", 90},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.makeSource(c.source)
			user := "-i inputs/src.mp4" + c.vf + " -c:v libx264 -preset veryfast -crf 28 -c:a aac -b:a 64k outputs/out.mp4"
			rep, chunks := r.chunked(user, 1, nil)
			r.mustPass(rep, chunks, c.frames)
			cmd := parseUser(t, user)
			r.run(ReferenceArgs(cmd, "chunks/reference.nut")...)
			at := func(p string) string { return filepath.Join(r.dir, p) }
			q := MeasureQuality(r.ctx, r.ffmpeg, r.ffprobe, at("inputs/src.mp4"), at("outputs/out.mp4"), at("chunks/reference.nut"), chunks)
			b, _ := json.Marshal(q)
			t.Logf("%d chunks, quality %s", len(chunks), b)
			if q.Error != "" {
				t.Fatalf("quality error: %s", q.Error)
			}
			if q.Frames != c.frames || q.Stitched.Frames != c.frames || q.SinglePass.Frames != c.frames {
				t.Fatalf("frames: source %d, stitched %d, single-pass %d; want %d", q.Frames, q.Stitched.Frames, q.SinglePass.Frames, c.frames)
			}
			if q.ComparedAt != "128x96 yuv420p" {
				t.Errorf("compared at %q, want the source's 128x96 yuv420p", q.ComparedAt)
			}
			for name, s := range map[string]QualityScores{"stitched": q.Stitched, "single-pass": q.SinglePass} {
				if s.PSNRMean < 20 || s.PSNRMean > 60 || s.PSNRWorst > s.PSNRMean || s.PSNRWorst <= 0 ||
					s.SSIMMean < 0.5 || s.SSIMMean > 1 || s.SSIMWorst > s.SSIMMean ||
					s.PSNRWorstFrame < 0 || s.PSNRWorstFrame >= c.frames || s.SSIMWorstFrame < 0 || s.SSIMWorstFrame >= c.frames {
					t.Errorf("%s scores %+v", name, s)
				}
			}
			if math.Abs(q.PSNRDelta) > 3 || math.Abs(q.PSNRDelta-(q.Stitched.PSNRMean-q.SinglePass.PSNRMean)) > 1e-3 {
				t.Errorf("PSNR delta %.4f (stitched %.4f, single-pass %.4f): want within 3 dB", q.PSNRDelta, q.Stitched.PSNRMean, q.SinglePass.PSNRMean)
			}
			if len(q.Seams) != len(chunks)-1 || q.WorstSeamPSNRDelta == nil {
				t.Fatalf("%d seams (worst %v) for %d chunks", len(q.Seams), q.WorstSeamPSNRDelta, len(chunks))
			}
			first := 0
			for i, s := range q.Seams {
				first += chunks[i].Frames
				if s.Chunk != i+1 || s.Frame != first || s.From != max(0, first-SeamWindow) || s.To != min(c.frames-1, first+SeamWindow-1) ||
					s.Stitched.PSNR < 20 || s.SinglePass.PSNR < 20 || s.Stitched.SSIM <= 0 || s.PSNRDelta < *q.WorstSeamPSNRDelta {
					t.Errorf("seam %d: %+v (worst delta %v)", i, s, *q.WorstSeamPSNRDelta)
				}
			}
			vmaf, _ := HasVMAF(r.ctx, r.ffmpeg)
			switch {
			case vmaf && (q.VMAF != "libvmaf" || q.Stitched.VMAFMean == nil || q.SinglePass.VMAFMean == nil || q.VMAFDelta == nil):
				t.Errorf("the local ffmpeg has libvmaf, the report: vmaf %q, %v %v", q.VMAF, q.Stitched.VMAFMean, q.SinglePass.VMAFMean)
			case !vmaf && (!strings.HasPrefix(q.VMAF, "not available on this worker") || q.Stitched.VMAFMean != nil || q.VMAFDelta != nil):
				t.Errorf("the local ffmpeg has no libvmaf, the report: vmaf %q, %v", q.VMAF, q.Stitched.VMAFMean)
			}
			// In the report, and kept by BoundVerification's reading.
			rep.Quality = q
			var back struct {
				Quality *Quality `json:"quality"`
			}
			if err := json.Unmarshal(rep.JSON(), &back); err != nil || back.Quality == nil || len(back.Quality.Seams) != len(q.Seams) {
				t.Fatalf("report JSON %s: %v", rep.JSON(), err)
			}
		})
	}
}

// The measure reads what it should: the source against itself is 100 dB (the
// stand-in for identical frames) and SSIM 1, and a coarser encode measured as
// the "stitched" file scores below the CRF 28 one, by its delta.
func TestQualityMeasuresTheRightWay(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.makeSource("cfr25")
	at := func(p string) string { return filepath.Join(r.dir, p) }
	good := parseUser(t, "-i inputs/src.mp4 -c:v libx264 -preset veryfast -crf 28 outputs/out.mp4")
	bad := parseUser(t, "-i inputs/src.mp4 -c:v libx264 -preset veryfast -crf 45 outputs/out.mkv")
	r.run(ReferenceArgs(good, "chunks/good.nut")...)
	r.run(ReferenceArgs(bad, "chunks/bad.nut")...)
	chunks := []Chunk{{Index: 0, Frames: 38}, {Index: 1, Frames: 37, Last: true}}

	same := MeasureQuality(r.ctx, r.ffmpeg, r.ffprobe, at("inputs/src.mp4"), at("inputs/src.mp4"), at("inputs/src.mp4"), chunks)
	if same.Error != "" || same.Stitched.PSNRMean != maxPSNR || same.Stitched.SSIMMean != 1 || same.PSNRDelta != 0 || len(same.Seams) != 1 {
		t.Fatalf("the source against itself: %+v", same)
	}
	q := MeasureQuality(r.ctx, r.ffmpeg, r.ffprobe, at("inputs/src.mp4"), at("chunks/bad.nut"), at("chunks/good.nut"), chunks)
	if q.Error != "" || q.PSNRDelta > -1 || q.SSIMDelta >= 0 || q.Seams[0].PSNRDelta > -1 || q.Stitched.PSNRMean >= q.SinglePass.PSNRMean {
		b, _ := json.Marshal(q)
		t.Fatalf("CRF 45 against CRF 28: %s; want the CRF 45 encode lower by over 1 dB", b)
	}
	// A file short of frames is compared as far as it goes, and said so.
	r.run("-i", "chunks/good.nut", "-frames:v", "50", "-c", "copy", "-f", "nut", "chunks/short.nut")
	short := MeasureQuality(r.ctx, r.ffmpeg, r.ffprobe, at("inputs/src.mp4"), at("chunks/good.nut"), at("chunks/short.nut"), chunks)
	if short.SinglePass.Frames != 50 || !strings.Contains(short.Error, "50 of the single-pass encode; the source has 75") {
		t.Fatalf("a single-pass encode 25 frames short: %+v", short)
	}
	// A tool that cannot run is an error in the report, not a panic or a
	// failure.
	missing := MeasureQuality(r.ctx, r.ffmpeg, r.ffprobe, at("inputs/src.mp4"), at("chunks/none.nut"), at("chunks/good.nut"), chunks)
	if !strings.Contains(missing.Error, "none.nut") {
		t.Fatalf("a missing file: %+v", missing)
	}
}

// ReferenceArgs is the user's command over the whole source, video only:
// no trim, no forced keyframe or closed GOP, the user's own encoder
// parameters as written, the container's options left to the stitch.
func TestReferenceArgs(t *testing.T) {
	cmd := parseUser(t, "-i inputs/src.mp4 -vf scale=96:-2 -c:v libx265 -crf 30 -x265-params log-level=error -force_key_frames 0,2 -c:a aac -b:a 64k -tag:v hvc1 -movflags +faststart outputs/out.mp4")
	got := strings.Join(ReferenceArgs(cmd, "outputs/reference.nut"), " ")
	want := "-y -i inputs/src.mp4 -map 0:V:0 -crf 30 -x265-params log-level=error -force_key_frames 0,2 -filter:v scale=96:-2 -an -sn -dn -c:v libx265 -fps_mode passthrough -enc_time_base -1 -f nut outputs/reference.nut"
	if got != want {
		t.Fatalf("ReferenceArgs:\n got %s\nwant %s", got, want)
	}
}

func parseUser(t *testing.T, user string) *Command {
	t.Helper()
	argv, err := command.Prepare(user, testSpec)
	if err != nil {
		t.Fatalf("command.Prepare: %v", err)
	}
	cmd, err := Parse(argv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cmd
}

// VMAF is used where `ffmpeg -filters` lists libvmaf (not vmafmotion, which
// Debian's ffmpeg has), and its mean is read from what libvmaf logs.
func TestVMAFDetection(t *testing.T) {
	with := " ... vmafmotion        V->V       Calculate the VMAF Motion score.\n ... libvmaf           VV->V      Calculate the VMAF between two video streams.\n"
	without := " TS. psnr              VV->V      Calculate the PSNR between two video streams.\n ... vmafmotion        V->V       Calculate the VMAF Motion score.\n"
	if !vmafFilter.MatchString(with) || vmafFilter.MatchString(without) {
		t.Fatalf("libvmaf detection: with %v, without %v", vmafFilter.MatchString(with), vmafFilter.MatchString(without))
	}
	if m := vmafScore.FindStringSubmatch("[Parsed_libvmaf_6 @ 0x5581] VMAF score: 93.456789\n"); m == nil || m[1] != "93.456789" {
		t.Fatalf("VMAF score read %v", m)
	}
}

// A phone's video (a display matrix turning it 90° or 270°): ffmpeg turns
// the source's pictures when it decodes them in the comparison, as it did in
// both encodes, so the comparison runs at the turned size (96x128), not the
// coded one, and scores both encodes (psnr and ssim refuse inputs of two
// sizes). 180° keeps the size.
func TestQualityOnARotatedSource(t *testing.T) {
	for name, rot := range rotations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.makeSource(name)
			user := "-i inputs/src.mp4 -c:v libx264 -preset veryfast -crf 28 -c:a aac -b:a 64k outputs/out.mp4"
			rep, chunks := r.chunked(user, 1, nil)
			r.mustPass(rep, chunks, 50+25*boolInt(rot == 90))
			r.run(ReferenceArgs(parseUser(t, user), "chunks/reference.nut")...)
			at := func(p string) string { return filepath.Join(r.dir, p) }
			q := MeasureQuality(r.ctx, r.ffmpeg, r.ffprobe, at("inputs/src.mp4"), at("outputs/out.mp4"), at("chunks/reference.nut"), chunks)
			b, _ := json.Marshal(q)
			if q.Error != "" {
				t.Fatalf("quality on a source rotated %d°: %s", rot, b)
			}
			want := "96x128 yuv420p"
			if rot == 180 {
				want = "128x96 yuv420p"
			}
			if q.ComparedAt != want || q.Stitched.Frames != q.Frames || q.SinglePass.Frames != q.Frames {
				t.Fatalf("compared at %q (want %q): %s", q.ComparedAt, want, b)
			}
			// Pictures turned alike: a high score, not a comparison of a
			// turned picture with an unturned one.
			if q.Stitched.PSNRMean < 30 || q.SinglePass.PSNRMean < 30 || math.Abs(q.PSNRDelta) > 3 {
				t.Fatalf("scores on a source rotated %d°: %s", rot, b)
			}
		})
	}
}
