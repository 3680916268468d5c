package mcp

import (
	"context"
	"testing"
)

// parseInputInfo reads the "Input #0" section of a level-tagged ffmpeg log and
// stops at the next section.
func TestParseInputInfo(t *testing.T) {
	log := "[info] Input #0, matroska,webm, from 'inputs/file':\n" +
		"[info]   Metadata:\n[info]     ENCODER         : Lavf60\n" +
		"[info]   Duration: 00:01:02.50, start: 0.000000, bitrate: 1234 kb/s\n" +
		"[info]   Stream #0:0(eng): Video: vp9 (Profile 0), yuv420p(tv), 1920x1080, SAR 1:1 DAR 16:9, 30 fps (default)\n" +
		"[info]   Stream #0:1(eng): Audio: opus, 48000 Hz, stereo, fltp (default)\n" +
		"[info] Stream mapping:\n[info]   Stream #0:0 -> #0:0 (vp9 (native) -> wrapped_avframe (native))\n"
	m := parseInputInfo(log)
	if m == nil || m.Format != "matroska,webm" || m.Duration != "00:01:02.50" || m.Bitrate != "1234 kb/s" || len(m.Streams) != 2 ||
		m.Streams[1] != "Stream #0:1(eng): Audio: opus, 48000 Hz, stereo, fltp (default)" {
		t.Fatalf("parsed %+v", m)
	}
	if parseInputInfo("[error] inputs/file: Invalid data found when processing input\n") != nil {
		t.Fatal("a log without an input section parsed")
	}
	// A live stream has no duration.
	if m := parseInputInfo("[info] Input #0, mpegts, from 'x':\n[info]   Duration: N/A, start: 1.4, bitrate: N/A\n"); m == nil || m.Duration != "N/A" {
		t.Fatalf("parsed %+v", m)
	}
}

// An input naming another job's output (job:<id>/<output>) goes to the service as
// it is, over HTTP (no local files) and over stdio (not a path to upload).
func TestRequestPassesJobReferences(t *testing.T) {
	ref := "job:3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b/out.mp4"
	for _, local := range []bool{false, true} {
		tl := &tools{local: local}
		req, err := tl.request(context.Background(), jobInput{InputFiles: map[string]string{"v": ref}, FFmpegCommands: []string{"-i {{v}} {{o.png}}"}}, true)
		if err != nil || req.InputFiles["v"] != ref {
			t.Fatalf("local %v: %v %v", local, req.InputFiles, err)
		}
	}
}
