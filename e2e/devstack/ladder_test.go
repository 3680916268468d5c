package devstack

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// An HLS ladder (-var_stream_map, -master_pl_name, one directory per variant)
// runs end to end, every file it wrote is published under its relative name, and
// the master playlist's download URL is one a player can open as it is: ffprobe
// reads both variants through it, and ffmpeg decodes a variant's segments through
// the signed links the rewritten playlists hold.
func TestHLSLadderMasterPlaylistPlaysByItsURL(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":  map[string]string{"clip": e2e.ClipURL},
		"output_files": []string{"master.m3u8", "stream_%v/playlist.m3u8", "stream_%v/data%03d.ts"},
		"ffmpeg_commands": []string{`-i {{clip}} -filter_complex "[0:v]split=2[a][b];[a]scale=320:240[v0];[b]scale=160:120[v1]" ` +
			`-map [v0] -map 0:a -map [v1] -map 0:a -c:v libx264 -preset ultrafast -b:v:0 400k -b:v:1 200k -c:a aac -b:a 64k -g 25 ` +
			`-f hls -hls_time 1 -hls_playlist_type vod -master_pl_name master.m3u8 ` +
			`-hls_segment_filename outputs/stream_%v/data%03d.ts -var_stream_map "v:0,a:0 v:1,a:1" outputs/stream_%v/playlist.m3u8`},
	})
	job := r.Data(t)
	if job["status"] != "succeeded" {
		t.Fatalf("%v: %v", job["status"], job["error_message"])
	}
	outs := job["output_files"].(map[string]any)
	for _, name := range []string{"master.m3u8", "stream_0/playlist.m3u8", "stream_1/playlist.m3u8", "stream_0/data000.ts", "stream_1/data000.ts"} {
		if _, ok := outs[name].(string); !ok {
			t.Fatalf("%s is not in output_files %v", name, outs)
		}
	}
	meta := job["outputs"].(map[string]any)["stream_1/data000.ts"].(map[string]any)
	if meta["format"] != "mpegts" || meta["size_bytes"].(float64) <= 0 {
		t.Fatalf("stream_1/data000.ts metadata %v", meta)
	}
	master := outs["master.m3u8"].(string)

	// The master playlist as served: its variants are absolute signed links.
	resp := e2e.Call(t, "GET", master, "", nil)
	if resp.Status != 200 || !strings.HasPrefix(string(resp.Body), "#EXTM3U") {
		t.Fatalf("master playlist: HTTP %d\n%s", resp.Status, resp.Body)
	}
	var variants []string
	for _, l := range strings.Split(string(resp.Body), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if !strings.HasPrefix(l, e2e.Stack.URL+"/files/") || !strings.Contains(l, "sig=") {
				t.Fatalf("the master playlist names %q, not a signed link:\n%s", l, resp.Body)
			}
			variants = append(variants, l)
		}
	}
	if len(variants) != 2 {
		t.Fatalf("the master playlist lists %d variants:\n%s", len(variants), resp.Body)
	}

	// ffprobe opens the master playlist by its URL and finds both variants.
	out, err := exec.Command(e2e.Ffprobe, "-v", "error", "-show_streams", "-of", "json", master).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v\n%s", master, err, e2e.ExitStderr(err))
	}
	var probed struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
			Width     int    `json:"width"`
		} `json:"streams"`
	}
	json.Unmarshal(out, &probed)
	widths := map[int]bool{}
	audio := 0
	for _, s := range probed.Streams {
		if s.CodecType == "video" {
			widths[s.Width] = true
		}
		if s.CodecType == "audio" {
			audio++
		}
	}
	if !widths[320] || !widths[160] || audio == 0 {
		t.Fatalf("ffprobe of the master playlist: %s", out)
	}

	// ffmpeg decodes the second variant's segments, through the master's link.
	for _, u := range []string{master, variants[1]} {
		out, err = exec.Command(e2e.Ffprobe, "-v", "error", "-count_frames", "-select_streams", "v:0",
			"-show_entries", "stream=nb_read_frames,width", "-of", "csv=p=0", u).Output()
		if err != nil {
			t.Fatalf("ffprobe -count_frames %s: %v\n%s", u, err, e2e.ExitStderr(err))
		}
		fields := strings.Split(strings.TrimSpace(strings.Split(string(out), "\n")[0]), ",")
		n, _ := strconv.Atoi(fields[len(fields)-1])
		if n <= 0 {
			t.Fatalf("%s: decoded %q frames", u, out)
		}
	}
	cmd := exec.Command("ffmpeg", "-v", "error", "-i", variants[1], "-f", "null", "-")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg -i <variant> -f null -: %v\n%s", err, b)
	}
}

// A job without output files (the measuring pass of a two-pass loudness
// normalisation) succeeds, keeps ffmpeg's log, and returns what loudnorm printed
// as JSON in the job's analysis.
func TestLoudnormAnalysisWithoutOutputs(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{},
		"ffmpeg_commands": []string{"-i {{clip}} -af loudnorm=I=-16:TP=-1.5:LRA=11:print_format=json -f null -"},
	})
	job := r.Data(t)
	if job["status"] != "succeeded" {
		t.Fatalf("%v: %v", job["status"], job["error_message"])
	}
	if outs := job["output_files"].(map[string]any); len(outs) != 0 {
		t.Fatalf("output_files %v", outs)
	}
	logURL, ok := job["logs"].(map[string]any)["1"].(string)
	if !ok {
		t.Fatalf("no log of command 1: %v", job["logs"])
	}
	if log := e2e.Call(t, "GET", logURL, "", nil); log.Status != 200 || !strings.Contains(string(log.Body), "Parsed_loudnorm_0") || !strings.Contains(string(log.Body), `"input_i"`) {
		t.Fatalf("log: HTTP %d\n%s", log.Status, e2e.Tail(string(log.Body), 2000))
	}
	analysis, _ := job["analysis"].([]any)
	if len(analysis) != 1 {
		t.Fatalf("analysis %v", job["analysis"])
	}
	a := analysis[0].(map[string]any)
	data, _ := a["data"].(map[string]any)
	if a["command"] != float64(1) || a["filter"] != "loudnorm" || a["instance"] != "Parsed_loudnorm_0" || data == nil {
		t.Fatalf("analysis %v", a)
	}
	for _, k := range []string{"input_i", "input_tp", "input_lra", "input_thresh", "target_offset"} {
		s, _ := data[k].(string)
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			t.Errorf("loudnorm's %s = %v, not a number", k, data[k])
		}
	}
	// The same in GET, and the second pass can use the measurements as they are.
	got := e2e.Call(t, "GET", "/api/jobs/"+job["id"].(string), e2e.Stack.APIKey, nil).Data(t)
	if b1, _ := json.Marshal(got["analysis"]); string(b1) != mustJSONString(job["analysis"]) {
		t.Fatalf("GET analysis %s, create %s", b1, mustJSONString(job["analysis"]))
	}
}

func mustJSONString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
