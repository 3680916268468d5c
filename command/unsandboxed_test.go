package command

import (
	"strings"
	"testing"
)

// TestPrepareUnsandboxed: on a pool without a sandbox (sandbox = "none") the forms
// that open files the checker never sees are refused, each with why and what to
// do instead; on sandboxed pools they run (TestPrepareOpened), and the rest of
// the command language is the same on both.
func TestPrepareUnsandboxed(t *testing.T) {
	strict := newSpec
	strict.Unsandboxed = true
	strict.Inputs = map[string]bool{"video": true, "list.txt": true, "a.ts": true, "master.m3u8": true, "list.M3U": true, "manifest.mpd": true}
	sandboxed := strict
	sandboxed.Unsandboxed = false
	for _, c := range []struct{ cmd, want string }{
		{"-f concat -safe 0 -i inputs/list.txt -c copy outputs/out.mp4", `"-safe" is not allowed: -safe 0 lets a concat list name absolute paths`},
		{"-f concat -safe 1 -i inputs/list.txt -c copy outputs/out.mp4", `"-safe" is not allowed`},
		{"-allowed_extensions ALL -i inputs/master.m3u8 -c copy outputs/out.mp4", `"-allowed_extensions" is not allowed`},
		{"-extension_picky 0 -i inputs/a.ts outputs/out.mp4", `"-extension_picky" is not allowed`},
		{"-enable_drefs 1 -i inputs/video outputs/out.mp4", `"-enable_drefs" is not allowed`},
		{"-dump_attachment:t '' -i inputs/video outputs/out.mp4", `"-dump_attachment:t" is not allowed`},
		{"-f hls -hls_key_info_file inputs/list.txt -i inputs/video outputs/stream_%v/playlist.m3u8", `"-hls_key_info_file" is not allowed`},
		// Playlists: by format, and by the name ffmpeg picks the HLS demuxer by.
		{"-i inputs/master.m3u8 -c copy outputs/out.mp4", `-i "inputs/master.m3u8" is not allowed: a playlist names files the checker never sees`},
		{"-i inputs/list.M3U -c copy outputs/out.mp4", "a playlist"},
		{"-i inputs/manifest.mpd -c copy outputs/out.mp4", "a playlist"},
		{"-f hls -i inputs/a.ts -c copy outputs/out.mp4", "-i with -f hls is not allowed"},
		{"-f DASH -i inputs/a.ts -c copy outputs/out.mp4", "-f dash is not allowed"},
		{`-filter_complex "movie=inputs/master.m3u8[v]" -map [v] outputs/out.mp4`, "a playlist"},
		{`-filter_complex "movie=inputs/a.ts:f=hls[v]" -map [v] outputs/out.mp4`, "a playlist"},
		// Hidden in an option list.
		{"-f concat -format_opts safe=0 -i inputs/list.txt -c copy outputs/out.mp4", `"safe" is not allowed`},
	} {
		_, err := Prepare(c.cmd, strict)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "without a sandbox") || !strings.Contains(err.Error(), "instead") {
			t.Errorf("unsandboxed Prepare(%q): %v\nwant %q, the reason (without a sandbox) and what to do instead", c.cmd, err, c.want)
		}
		if _, err := Prepare(c.cmd, sandboxed); err != nil {
			t.Errorf("sandboxed Prepare(%q): %v", c.cmd, err)
		}
	}
	// What opens only the files the command names runs on both.
	for _, cmd := range []string{
		"-f concat -i inputs/list.txt -c copy outputs/out.mp4",
		"-i concat:inputs/a.ts|inputs/video -c copy outputs/out.mp4",
		"-i inputs/video -c:v libx264 -f hls -hls_segment_filename outputs/stream_%v/data%03d.ts outputs/stream_%v/playlist.m3u8",
		"-i inputs/video -c:v libx264 -f hls -master_pl_name master.m3u8 outputs/stream_%v/playlist.m3u8",
	} {
		if _, err := Prepare(cmd, strict); err != nil {
			t.Errorf("unsandboxed Prepare(%q): %v", cmd, err)
		}
	}
}
