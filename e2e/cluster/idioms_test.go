package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

// TestRealWorldIdioms runs the command idioms of ffmpeg's documentation and wiki
// (concat demuxer, protocol and filter, two-pass encodes, analysis passes, image
// sequences, HLS and DASH ladders, subtitle burn-in, GIFs, transitions, watermarks,
// loudness, sprite sheets, …) through the API on both drivers, as a user would paste
// them, adapted only to inputs/… and outputs/… names. Every job must succeed and
// every output it declares must download by its signed link and probe as the media
// the idiom makes; analysis jobs must leave their result in the log or in
// `analysis`; the ladders must open by their playlist's URL.
//
// The jobs of a driver are all created first and then waited for, so the table
// costs about as long as its slowest job.
// driverCluster is a dev stack with one dispatcher whose "cpu" pool runs on
// raw_exec, or with a "docker" pool of the worker image; machine names the pool.
func driverCluster(t *testing.T, driver string) (c *e2e.Cluster, machine string) {
	extra, machine := "", "cpu"
	if driver == "docker" {
		needDocker(t)
		extra, machine = dockerPool(""), "docker"
	}
	c = e2e.NewCluster(t, e2e.Agent, extra)
	c.StartDispatcher("d")
	return c, machine
}

func TestRealWorldIdioms(t *testing.T) {
	e2e.NeedStack(t)
	media := newIdiomMedia(t)
	for _, driver := range []string{"raw_exec", "docker"} {
		t.Run(driver, func(t *testing.T) {
			c, machine := driverCluster(t, driver)
			ids := make([]string, len(idioms))
			for i, row := range idioms {
				inputs := map[string]string{}
				for _, name := range row.inputs {
					inputs[name] = media.url + "/" + name
				}
				ids[i] = c.Create(map[string]any{
					"input_files":     inputs,
					"output_files":    row.outputs,
					"ffmpeg_commands": row.cmds,
					"machine":         machine,
					"metadata":        map[string]string{"idiom": row.name},
				})
			}
			for i, row := range idioms {
				t.Run(row.name, func(t *testing.T) {
					j := idiomWait(t, c, ids[i])
					if j["status"] != "succeeded" {
						t.Fatalf("%s: job %v: %v\ncommands: %q\nlogs: %v", row.name, j["status"], j["error_message"], row.cmds, j["logs"])
					}
					row.check(t, c, j, machine)
				})
			}
		})
	}
}

// idiomWait polls the job until it is terminal (on the subtest's own t).
func idiomWait(t *testing.T, c *e2e.Cluster, id string) map[string]any {
	t.Helper()
	var j map[string]any
	testenv.Eventually(t, 240*time.Second, "job "+id+" to finish", func() bool {
		j = e2e.Call(t, "GET", c.APIURL+"/api/jobs/"+id, c.Key, nil).Data(t)
		s := j["status"]
		return s == "succeeded" || s == "failed" || s == "cancelled"
	})
	return j
}

// probed is what ffprobe finds in one published file.
type probed struct {
	types  string // the streams' codec types, sorted: "audio,video"
	format string // format_name, where it matters ("gif")
	codec  string // the first stream's codec, where it matters
	w, h   int    // the first video stream's size, where it matters
	// untagged: the file carries no title tag (the inputs carry one).
	untagged bool
}

type idiom struct {
	name    string
	inputs  []string // names of the generated media (newIdiomMedia)
	outputs []string
	cmds    []string
	files   map[string]probed // published name → what ffprobe must find
	// log: text the log of command logCmd (1-based; 0 = the last) must hold.
	log    string
	logCmd int
	// loudnorm: the job's analysis carries loudnorm's measurement, and a second
	// job normalises with it (the second pass of two-pass loudnorm).
	loudnorm bool
	// playlist: an output opened by its download URL; ffprobe must find at least
	// variants video streams of distinct widths, and audio.
	playlist string
	variants int
	// atLeast: sequence outputs (name prefix → how many files at least).
	atLeast map[string]int
}

const x264 = "-c:v libx264 -preset ultrafast"

var av = probed{types: "audio,video"}

var idioms = []idiom{
	// Concatenation (wiki: Concatenate).
	{
		name:    "concat demuxer, bare names, -safe 0",
		inputs:  []string{"a.mp4", "b.mp4", "list.txt"},
		outputs: []string{"joined.mp4"},
		cmds:    []string{"-f concat -safe 0 -i inputs/list.txt -c copy outputs/joined.mp4"},
		files:   map[string]probed{"joined.mp4": av},
	},
	{
		// Entries as commands name the files: ffmpeg reads them relative to the
		// list (inputs/inputs/a.mp4), which the job's links resolve.
		name:    "concat demuxer, entries named inputs/<name>, default -safe",
		inputs:  []string{"a.mp4", "b.mp4", "list_cmd.txt"},
		outputs: []string{"joined.mp4"},
		cmds:    []string{"-f concat -i inputs/list_cmd.txt -c copy outputs/joined.mp4"},
		files:   map[string]probed{"joined.mp4": av},
	},
	{
		name:    "concat demuxer, absolute job paths",
		inputs:  []string{"a.mp4", "b.mp4", "list_abs.txt"},
		outputs: []string{"joined.mp4"},
		cmds:    []string{"-f concat -safe 0 -i inputs/list_abs.txt -c copy outputs/joined.mp4"},
		files:   map[string]probed{"joined.mp4": av},
	},
	{
		name:    "concat protocol over intermediate .ts files",
		inputs:  []string{"a.mp4", "b.mp4"},
		outputs: []string{"joined.mp4"},
		cmds: []string{
			"-i inputs/a.mp4 -c copy -bsf:v h264_mp4toannexb -f mpegts intermediate1.ts",
			"-i inputs/b.mp4 -c copy -bsf:v h264_mp4toannexb -f mpegts intermediate2.ts",
			`-i "concat:intermediate1.ts|intermediate2.ts" -c copy -bsf:a aac_adtstoasc outputs/joined.mp4`,
		},
		files: map[string]probed{"joined.mp4": av},
	},
	{
		name:    "concat filter",
		inputs:  []string{"a.mp4", "b.mp4"},
		outputs: []string{"joined.mp4"},
		cmds: []string{`-i inputs/a.mp4 -i inputs/b.mp4 -filter_complex "[0:v][0:a][1:v][1:a]concat=n=2:v=1:a=1[outv][outa]" ` +
			`-map "[outv]" -map "[outa]" ` + x264 + ` outputs/joined.mp4`},
		files: map[string]probed{"joined.mp4": av},
	},
	// Two-pass encodes (wiki: Encode/H.264, Encode/VP9).
	{
		name:    "two-pass x264, first pass to /dev/null",
		inputs:  []string{"a.mp4"},
		outputs: []string{"out.mp4"},
		cmds: []string{
			"-y -i inputs/a.mp4 " + x264 + " -b:v 300k -pass 1 -an -f null /dev/null",
			"-i inputs/a.mp4 " + x264 + " -b:v 300k -pass 2 -c:a aac -b:a 64k outputs/out.mp4",
		},
		files: map[string]probed{"out.mp4": av},
	},
	{
		name:    "two-pass x264, first pass to NUL",
		inputs:  []string{"a.mp4"},
		outputs: []string{"out.mp4"},
		cmds: []string{
			"-y -i inputs/a.mp4 " + x264 + " -b:v 300k -pass 1 -an -f null NUL",
			"-i inputs/a.mp4 " + x264 + " -b:v 300k -pass 2 -c:a aac -b:a 64k outputs/out.mp4",
		},
		files: map[string]probed{"out.mp4": av},
	},
	{
		name:    "two-pass vp9, first pass -f webm /dev/null",
		inputs:  []string{"a.mp4"},
		outputs: []string{"out.webm"},
		cmds: []string{
			"-i inputs/a.mp4 -c:v libvpx-vp9 -b:v 300k -deadline good -cpu-used 8 -pass 1 -an -y -f webm /dev/null",
			"-i inputs/a.mp4 -c:v libvpx-vp9 -b:v 300k -deadline good -cpu-used 8 -pass 2 -c:a libopus outputs/out.webm",
		},
		files: map[string]probed{"out.webm": {types: "audio,video", codec: "vp9"}},
	},
	// Analysis passes: no output file.
	{
		name:     "loudnorm measuring pass, then the second pass",
		inputs:   []string{"a.mp4"},
		outputs:  []string{},
		cmds:     []string{"-i inputs/a.mp4 -af loudnorm=I=-16:TP=-1.5:LRA=11:print_format=json -f null -"},
		loudnorm: true,
	},
	{
		name:    "volumedetect",
		inputs:  []string{"a.mp4"},
		outputs: []string{},
		cmds:    []string{"-i inputs/a.mp4 -af volumedetect -vn -sn -dn -f null /dev/null"},
		log:     "max_volume:",
	},
	{
		name:    "ebur128",
		inputs:  []string{"a.mp4"},
		outputs: []string{},
		cmds:    []string{"-nostats -i inputs/a.mp4 -filter_complex ebur128 -f null -"},
		log:     "Integrated loudness:",
	},
	{
		name:    "loudnorm single pass",
		inputs:  []string{"a.mp4"},
		outputs: []string{"normalized.mp4"},
		cmds:    []string{"-i inputs/a.mp4 -af loudnorm=I=-23:LRA=7:TP=-2 -ar 48000 -c:v copy outputs/normalized.mp4"},
		files:   map[string]probed{"normalized.mp4": av},
	},
	// Image sequences (wiki: Slideshow).
	{
		name:    "image sequence to video",
		inputs:  []string{"img001.png", "img002.png", "img003.png", "img004.png", "img005.png"},
		outputs: []string{"slideshow.mp4"},
		cmds:    []string{"-framerate 5 -i inputs/img%03d.png " + x264 + " -pix_fmt yuv420p outputs/slideshow.mp4"},
		files:   map[string]probed{"slideshow.mp4": {types: "video", codec: "h264", w: 160, h: 120}},
	},
	{
		name:    "image glob to video",
		inputs:  []string{"img001.png", "img002.png", "img003.png", "img004.png", "img005.png"},
		outputs: []string{"slideshow.mp4"},
		cmds:    []string{"-framerate 5 -pattern_type glob -i 'inputs/img*.png' " + x264 + " -pix_fmt yuv420p outputs/slideshow.mp4"},
		files:   map[string]probed{"slideshow.mp4": {types: "video", codec: "h264", w: 160, h: 120}},
	},
	{
		name:    "a thumbnail every second",
		inputs:  []string{"a.mp4"},
		outputs: []string{"thumb_%03d.png"},
		cmds:    []string{"-i inputs/a.mp4 -vf fps=1 outputs/thumb_%03d.png"},
		files:   map[string]probed{"thumb_001.png": {types: "video", codec: "png", w: 320, h: 240}},
		atLeast: map[string]int{"thumb_": 2},
	},
	{
		name:    "thumbnail at 1s",
		inputs:  []string{"a.mp4"},
		outputs: []string{"thumb.jpg"},
		cmds:    []string{"-ss 1 -i inputs/a.mp4 -frames:v 1 -q:v 2 outputs/thumb.jpg"},
		files:   map[string]probed{"thumb.jpg": {types: "video", codec: "mjpeg", w: 320, h: 240}},
	},
	// Adaptive streaming.
	{
		name:    "HLS ladder with -var_stream_map and -master_pl_name",
		inputs:  []string{"a.mp4"},
		outputs: []string{"master.m3u8", "stream_%v/playlist.m3u8", "stream_%v/data%03d.ts"},
		cmds: []string{`-i inputs/a.mp4 -filter_complex "[0:v]split=2[v1][v2];[v1]scale=w=320:h=240[v1out];[v2]scale=w=160:h=120[v2out]" ` +
			`-map "[v1out]" -c:v:0 libx264 -b:v:0 400k -map "[v2out]" -c:v:1 libx264 -b:v:1 200k -preset ultrafast -g 25 -sc_threshold 0 ` +
			`-map a:0 -c:a:0 aac -b:a:0 64k -map a:0 -c:a:1 aac -b:a:1 48k ` +
			`-f hls -hls_time 1 -hls_playlist_type vod -hls_flags independent_segments -hls_segment_type mpegts ` +
			`-hls_segment_filename outputs/stream_%v/data%03d.ts -master_pl_name master.m3u8 ` +
			`-var_stream_map "v:0,a:0 v:1,a:1" outputs/stream_%v/playlist.m3u8`},
		files:    map[string]probed{"stream_0/data000.ts": av, "stream_1/data000.ts": av},
		playlist: "master.m3u8",
		variants: 2,
	},
	{
		name:   "DASH ladder with the dash muxer's default segment names",
		inputs: []string{"a.mp4"},
		outputs: []string{"manifest.mpd", "init-stream0.m4s", "init-stream1.m4s", "init-stream2.m4s",
			"chunk-stream0-%05d.m4s", "chunk-stream1-%05d.m4s", "chunk-stream2-%05d.m4s"},
		cmds: []string{"-i inputs/a.mp4 -map 0:v -map 0:v -map 0:a " + x264 + " -b:v:0 400k -b:v:1 150k -s:v:1 160x120 " +
			"-c:a aac -b:a 64k -g 25 -keyint_min 25 -sc_threshold 0 -seg_duration 1 -use_template 1 -use_timeline 1 " +
			`-adaptation_sets "id=0,streams=v id=1,streams=a" -f dash outputs/manifest.mpd`},
		files:    map[string]probed{"init-stream0.m4s": {types: "video"}, "init-stream2.m4s": {types: "audio"}},
		playlist: "manifest.mpd",
		variants: 2,
	},
	{
		name:   "DASH with -init_seg_name and -media_seg_name templates",
		inputs: []string{"a.mp4"},
		outputs: []string{"manifest.mpd", "init-0.m4s", "init-1.m4s",
			"chunk-0-%05d.m4s", "chunk-1-%05d.m4s"},
		cmds: []string{"-i inputs/a.mp4 -map 0:v -map 0:a " + x264 + " -c:a aac -g 25 -seg_duration 1 " +
			`-init_seg_name 'init-$RepresentationID$.$ext$' -media_seg_name 'chunk-$RepresentationID$-$Number%05d$.$ext$' ` +
			"-f dash outputs/manifest.mpd"},
		files:    map[string]probed{"init-0.m4s": {types: "video"}, "init-1.m4s": {types: "audio"}},
		playlist: "manifest.mpd",
		variants: 1,
	},
	// Subtitles burned in (docs: subtitles, ass filters; wiki: HowToBurnSubtitlesIntoVideo).
	{
		name:    "subtitles= burn-in from .srt",
		inputs:  []string{"a.mp4", "subs.srt"},
		outputs: []string{"burned.mp4"},
		cmds:    []string{"-i inputs/a.mp4 -vf subtitles=inputs/subs.srt " + x264 + " -c:a copy outputs/burned.mp4"},
		files:   map[string]probed{"burned.mp4": av},
	},
	{
		name:    "ass= burn-in from .ass",
		inputs:  []string{"a.mp4", "subs.ass"},
		outputs: []string{"burned.mp4"},
		cmds:    []string{`-i inputs/a.mp4 -vf "ass=inputs/subs.ass" ` + x264 + " -c:a copy outputs/burned.mp4"},
		files:   map[string]probed{"burned.mp4": av},
	},
	// GIFs (palettegen/paletteuse docs and the well-known high-quality GIF recipe).
	{
		name:    "GIF with palettegen then paletteuse",
		inputs:  []string{"a.mp4"},
		outputs: []string{"out.gif"},
		cmds: []string{
			`-i inputs/a.mp4 -vf "fps=10,scale=160:-1:flags=lanczos,palettegen" -y palette.png`,
			`-i inputs/a.mp4 -i palette.png -filter_complex "fps=10,scale=160:-1:flags=lanczos[x];[x][1:v]paletteuse" outputs/out.gif`,
		},
		files: map[string]probed{"out.gif": {types: "video", format: "gif", codec: "gif", w: 160, h: 120}},
	},
	{
		name:    "GIF with split, palettegen and paletteuse in one graph",
		inputs:  []string{"a.mp4"},
		outputs: []string{"out.gif"},
		cmds: []string{`-i inputs/a.mp4 -filter_complex "[0:v] fps=10,scale=160:-1,split [a][b];[a] palettegen [p];[b][p] paletteuse" ` +
			`-loop 0 outputs/out.gif`},
		files: map[string]probed{"out.gif": {types: "video", format: "gif", codec: "gif", w: 160, h: 120}},
	},
	// Compositing.
	{
		name:    "xfade and acrossfade between two clips",
		inputs:  []string{"a.mp4", "b.mp4"},
		outputs: []string{"xfade.mp4"},
		cmds: []string{`-i inputs/a.mp4 -i inputs/b.mp4 -filter_complex ` +
			`"[0:v][1:v]xfade=transition=fade:duration=0.5:offset=1.5,format=yuv420p[v];[0:a][1:a]acrossfade=d=0.5[a]" ` +
			`-map "[v]" -map "[a]" ` + x264 + ` outputs/xfade.mp4`},
		files: map[string]probed{"xfade.mp4": av},
	},
	{
		name:    "overlay watermark in the bottom right corner",
		inputs:  []string{"a.mp4", "logo.png"},
		outputs: []string{"watermarked.mp4"},
		cmds: []string{`-i inputs/a.mp4 -i inputs/logo.png -filter_complex "overlay=main_w-overlay_w-10:main_h-overlay_h-10" ` +
			x264 + ` -codec:a copy outputs/watermarked.mp4`},
		files: map[string]probed{"watermarked.mp4": {types: "audio,video", w: 320, h: 240}},
	},
	{
		name:    "amix of two audio inputs",
		inputs:  []string{"a.mp4", "b.mp4"},
		outputs: []string{"mix.mp3"},
		cmds:    []string{"-i inputs/a.mp4 -i inputs/b.mp4 -filter_complex amix=inputs=2:duration=longest:dropout_transition=1 -vn outputs/mix.mp3"},
		files:   map[string]probed{"mix.mp3": {types: "audio", codec: "mp3"}},
	},
	{
		name:    "showwavespic",
		inputs:  []string{"a.mp4"},
		outputs: []string{"waveform.png"},
		cmds:    []string{"-i inputs/a.mp4 -filter_complex showwavespic=s=640x120 -frames:v 1 outputs/waveform.png"},
		files:   map[string]probed{"waveform.png": {types: "video", codec: "png", w: 640, h: 120}},
	},
	{
		name:    "tile sprite sheet",
		inputs:  []string{"a.mp4"},
		outputs: []string{"sprite.png"},
		cmds:    []string{"-i inputs/a.mp4 -vf fps=1,scale=80:-1,tile=3x2 -frames:v 1 outputs/sprite.png"},
		files:   map[string]probed{"sprite.png": {types: "video", codec: "png", w: 240, h: 120}},
	},
	// Stream and metadata selection.
	{
		name:    "metadata stripping",
		inputs:  []string{"a.mp4"},
		outputs: []string{"clean.mp4"},
		cmds:    []string{"-i inputs/a.mp4 -map_metadata -1 -c copy outputs/clean.mp4"},
		files:   map[string]probed{"clean.mp4": {types: "audio,video", untagged: true}},
	},
	{
		name:    "-map 0:v -map 0:a? with and without audio",
		inputs:  []string{"a.mp4", "noaudio.mp4"},
		outputs: []string{"silent.mp4", "both.mp4"},
		cmds: []string{
			"-i inputs/noaudio.mp4 -map 0:v -map 0:a? -c copy outputs/silent.mp4",
			"-i inputs/a.mp4 -map 0:v -map 0:a? -c copy outputs/both.mp4",
		},
		files: map[string]probed{"silent.mp4": {types: "video"}, "both.mp4": av},
	},
}

func (row idiom) check(t *testing.T, c *e2e.Cluster, j map[string]any, machine string) {
	t.Helper()
	links, _ := j["output_files"].(map[string]any)
	if len(row.outputs) == 0 && len(links) != 0 {
		t.Fatalf("an analysis job published %v", links)
	}
	for name, want := range row.files {
		u, ok := links[name].(string)
		if !ok {
			t.Fatalf("%s is not in output_files %v", name, keys(links))
		}
		checkProbe(t, name, e2e.Probe(t, e2e.Download(t, u)), want)
	}
	for prefix, n := range row.atLeast {
		got := 0
		for name := range links {
			if strings.HasPrefix(name, prefix) {
				got++
			}
		}
		if got < n {
			t.Fatalf("%d outputs named %s*, want at least %d: %v", got, prefix, n, keys(links))
		}
	}
	if row.log != "" {
		n := row.logCmd
		if n == 0 {
			n = len(row.cmds)
		}
		u, ok := j["logs"].(map[string]any)[fmt.Sprint(n)].(string)
		if !ok {
			t.Fatalf("no log of command %d: %v", n, j["logs"])
		}
		if r := e2e.Call(t, "GET", u, "", nil); r.Status != 200 || !strings.Contains(string(r.Body), row.log) {
			t.Fatalf("log of command %d: HTTP %d, want %q in\n%s", n, r.Status, row.log, e2e.Tail(string(r.Body), 3000))
		}
	}
	if row.loudnorm {
		checkLoudnormSecondPass(t, c, j, machine)
	}
	if row.playlist != "" {
		u, ok := links[row.playlist].(string)
		if !ok {
			t.Fatalf("%s is not in output_files %v", row.playlist, keys(links))
		}
		out, err := exec.Command(e2e.Ffprobe, "-v", "error", "-show_streams", "-of", "json", u).Output()
		if err != nil {
			body := e2e.Call(t, "GET", u, "", nil).Body
			t.Fatalf("ffprobe %s: %v\n%s\nas served:\n%s", row.playlist, err, e2e.ExitStderr(err), e2e.Tail(string(body), 3000))
		}
		var m struct {
			Streams []struct {
				CodecType string `json:"codec_type"`
				Width     int    `json:"width"`
			} `json:"streams"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		widths, audio := map[int]bool{}, false
		for _, s := range m.Streams {
			switch s.CodecType {
			case "video":
				widths[s.Width] = true
			case "audio":
				audio = true
			}
		}
		if len(widths) < row.variants || !audio {
			t.Fatalf("ffprobe of %s by its URL: %d video widths (want %d) and audio %v:\n%s", row.playlist, len(widths), row.variants, audio, out)
		}
	}
}

func checkProbe(t *testing.T, name string, m map[string]any, want probed) {
	t.Helper()
	streams, _ := m["streams"].([]any)
	format, _ := m["format"].(map[string]any)
	var types []string
	var first, video map[string]any
	for _, s := range streams {
		s := s.(map[string]any)
		types = append(types, fmt.Sprint(s["codec_type"]))
		if first == nil {
			first = s
		}
		if video == nil && s["codec_type"] == "video" {
			video = s
		}
	}
	sort.Strings(types)
	if got := strings.Join(types, ","); got != want.types {
		t.Fatalf("%s: streams %s, want %s\n%v", name, got, want.types, m)
	}
	if want.format != "" && format["format_name"] != want.format {
		t.Fatalf("%s: format %v, want %s", name, format["format_name"], want.format)
	}
	if want.codec != "" && first["codec_name"] != want.codec {
		t.Fatalf("%s: codec %v, want %s", name, first["codec_name"], want.codec)
	}
	if want.w != 0 && (video["width"] != float64(want.w) || video["height"] != float64(want.h)) {
		t.Fatalf("%s: %vx%v, want %dx%d", name, video["width"], video["height"], want.w, want.h)
	}
	if want.untagged {
		tags, _ := format["tags"].(map[string]any)
		if _, ok := tags["title"]; ok {
			t.Fatalf("%s still carries the input's title: %v", name, tags)
		}
	}
}

// checkLoudnormSecondPass reads the first pass's measurement from the job's
// analysis and runs the second pass with it, as the loudnorm docs describe.
func checkLoudnormSecondPass(t *testing.T, c *e2e.Cluster, j map[string]any, machine string) {
	t.Helper()
	analysis, _ := j["analysis"].([]any)
	if len(analysis) != 1 {
		t.Fatalf("analysis %v", j["analysis"])
	}
	a, _ := analysis[0].(map[string]any)
	data, _ := a["data"].(map[string]any)
	if a["filter"] != "loudnorm" || data == nil {
		t.Fatalf("analysis %v", a)
	}
	get := func(k string) string {
		s, ok := data[k].(string)
		if !ok || s == "" {
			t.Fatalf("loudnorm's %s missing in %v", k, data)
		}
		return s
	}
	af := fmt.Sprintf("loudnorm=I=-16:TP=-1.5:LRA=11:measured_I=%s:measured_TP=%s:measured_LRA=%s:measured_thresh=%s:offset=%s:linear=true:print_format=summary",
		get("input_i"), get("input_tp"), get("input_lra"), get("input_thresh"), get("target_offset"))
	in := j["input_files"].(map[string]any)["a.mp4"].(string)
	r := e2e.Call(t, "POST", c.APIURL+"/api/ffmpeg", c.Key, map[string]any{
		"input_files":     map[string]string{"a.mp4": in},
		"output_files":    []string{"normalized.mp4"},
		"ffmpeg_commands": []string{"-i inputs/a.mp4 -af " + af + " -ar 48000 -c:v copy outputs/normalized.mp4"},
		"machine":         machine,
	})
	if r.Status != 200 {
		t.Fatalf("second pass: %d %s", r.Status, r.Body)
	}
	j2 := idiomWait(t, c, r.Data(t)["id"].(string))
	if j2["status"] != "succeeded" {
		t.Fatalf("second pass: %v: %v", j2["status"], j2["error_message"])
	}
	u := j2["output_files"].(map[string]any)["normalized.mp4"].(string)
	checkProbe(t, "normalized.mp4", e2e.Probe(t, e2e.Download(t, u)), av)
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// idiomMedia is the table's inputs, made by the real ffmpeg and served on loopback.
type idiomMedia struct{ url string }

func newIdiomMedia(t *testing.T) idiomMedia {
	t.Helper()
	dir := t.TempDir()
	ff := func(args ...string) {
		t.Helper()
		cmd := exec.Command("ffmpeg", append([]string{"-v", "error", "-y"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg %q: %v\n%s", args, err, out)
		}
	}
	clip := func(name, src string, freq int) {
		ff("-f", "lavfi", "-i", src+"=duration=2:size=320x240:rate=25",
			"-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=%d:duration=2", freq),
			"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", "25", "-c:a", "aac",
			"-metadata", "title=mediajobs idioms", "-shortest", name)
	}
	clip("a.mp4", "testsrc", 440)
	clip("b.mp4", "testsrc2", 880)
	ff("-f", "lavfi", "-i", "smptebars=duration=2:size=320x240:rate=25", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "noaudio.mp4")
	ff("-f", "lavfi", "-i", "testsrc=size=64x48", "-frames:v", "1", "logo.png")
	ff("-f", "lavfi", "-i", "testsrc=duration=1:size=160x120:rate=5", "img%03d.png")
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("subs.srt", "1\n00:00:00,000 --> 00:00:02,000\nHello from the subtitles\n")
	ff("-i", "subs.srt", "subs.ass")
	write("list.txt", "file 'a.mp4'\nfile 'b.mp4'\n")
	write("list_abs.txt", "file '/job/inputs/a.mp4'\nfile '/job/inputs/b.mp4'\n")
	write("list_cmd.txt", "file 'inputs/a.mp4'\nfile 'inputs/b.mp4'\n")

	// Controls: what the checks rely on is there in the inputs.
	if tags, _ := e2e.Probe(t, filepath.Join(dir, "a.mp4"))["format"].(map[string]any)["tags"].(map[string]any); tags["title"] == nil {
		t.Fatalf("a.mp4 has no title tag to strip: %v", tags)
	}
	for i := 1; i <= 5; i++ {
		if !e2e.FileExists(filepath.Join(dir, fmt.Sprintf("img%03d.png", i))) {
			t.Fatalf("img%03d.png was not made", i)
		}
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return idiomMedia{url: srv.URL}
}
