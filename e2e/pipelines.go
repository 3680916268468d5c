package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// The worked ladder of docs/pipelines.md, small, shared by the end-to-end
// tests that run it on raw_exec (devstack) and on docker (cluster).

// LadderHeights are the ladder's rungs, as LadderPipeline fans them out.
var LadderHeights = []int{72, 96}

// LadderPipeline is the worked example of docs/pipelines.md, small: src
// fanned out into two renditions (rung), an HLS master playlist over both
// fanned in (hls, with 1 s segments), a thumbnail strip beside (thumbs); its
// webhook to hook; every step on machine ("": the default pool).
func LadderPipeline(src, machine, hook string) map[string]any {
	var items []map[string]string
	for i, h := range LadderHeights {
		items = append(items, map[string]string{"height": fmt.Sprint(h), "bitrate": []string{"100k", "150k"}[i%2]})
	}
	steps := map[string]any{
		"rung": map[string]any{
			"input_files":  map[string]string{"src": src},
			"output_files": []string{"r${item.height}.mp4"},
			"ffmpeg_commands": []string{"-i {{src}} -t 2 -vf scale=-2:${item.height} -c:v libx264 -preset ultrafast -g 25 -b:v ${item.bitrate} " +
				"-c:a aac -b:a 64k {{r${item.height}.mp4}}"},
			"for_each": items,
		},
		"hls": map[string]any{
			"input_files":  map[string]string{"r": "step:rung[*]/r${item.height}.mp4"},
			"output_files": []string{"master.m3u8", "v%v/index.m3u8", "v%v/seg_%03d.ts"},
			"ffmpeg_commands": []string{`${each:r:-i {{r}}} ${each:r:-map ${index}:v -map ${index}:a} -c copy -f hls -hls_time 1 -hls_playlist_type vod ` +
				`-var_stream_map "${each:r:v:${index},a:${index},name:${item.height}p}" -master_pl_name master.m3u8 -hls_segment_filename {{v%v/seg_%03d.ts}} {{v%v/index.m3u8}}`},
		},
		"thumbs": map[string]any{
			"input_files":     map[string]string{"src": src},
			"output_files":    []string{"strip.jpg"},
			"ffmpeg_commands": []string{"-i {{src}} -vf fps=1,scale=32:-2,tile=3x1 -frames:v 1 {{strip.jpg}}"},
		},
	}
	if machine != "" {
		for _, s := range steps {
			s.(map[string]any)["machine"] = machine
		}
	}
	return map[string]any{"steps": steps, "webhook_url": hook, "fail_fast": true}
}

// PipelineStep is a pipeline view's step by name.
func PipelineStep(t *testing.T, p map[string]any, name string) map[string]any {
	t.Helper()
	for _, s := range p["steps"].([]any) {
		if s := s.(map[string]any); s["name"] == name {
			return s
		}
	}
	t.Fatalf("no step %s in %v", name, p["steps"])
	return nil
}

// StepJobs are a step's jobs, in item order.
func StepJobs(s map[string]any) []map[string]any {
	var out []map[string]any
	for _, j := range s["jobs"].([]any) {
		out = append(out, j.(map[string]any))
	}
	return out
}

// WaitPipeline polls api's GET /api/pipelines/{id} (api: a gateway's base
// URL) until the pipeline has ended and its webhook, when it has one, is no
// longer pending.
func WaitPipeline(t *testing.T, api, key, id string, timeout time.Duration) map[string]any {
	t.Helper()
	var p map[string]any
	testenv.Eventually(t, timeout, "pipeline "+id+" to end", func() bool {
		p = Call(t, "GET", api+"/api/pipelines/"+id, key, nil).Data(t)
		switch p["status"] {
		case "succeeded", "failed", "cancelled":
			w, _ := p["webhook"].(map[string]any)
			return p["webhook_url"] == nil || w != nil && w["status"] != "pending"
		}
		return false
	})
	return p
}

// CheckLadder asserts what LadderPipeline made, p its ended view at api:
// it succeeded, its steps in the order rung, thumbs, hls; every rendition
// probed (its height, with audio), each rung's job naming its pipeline, step
// and item; the master playlist opened by ffprobe through its signed link,
// with every rendition in it; the thumbnail strip three 32 px frames wide;
// and exactly one pipeline webhook, delivered at the first attempt.
func CheckLadder(t *testing.T, api, key string, p map[string]any) {
	t.Helper()
	id := p["id"].(string)
	if p["status"] != "succeeded" {
		b, _ := json.MarshalIndent(p["steps"], "", "  ")
		t.Fatalf("pipeline %v: %v\n%s", p["status"], p["error_message"], b)
	}
	var order []string
	for _, s := range p["steps"].([]any) {
		s := s.(map[string]any)
		order = append(order, s["name"].(string))
		if s["status"] != "succeeded" || s["duration_seconds"] == nil {
			t.Fatalf("step %v: %v, duration %v", s["name"], s["status"], s["duration_seconds"])
		}
	}
	if strings.Join(order, ",") != "rung,thumbs,hls" {
		t.Fatalf("steps in the order %v, want rung,thumbs,hls (a step after those it takes outputs of)", order)
	}

	// Each rendition, probed; each job knows its pipeline, step and item.
	rungs := StepJobs(PipelineStep(t, p, "rung"))
	if len(rungs) != len(LadderHeights) {
		t.Fatalf("%d rungs, want %d", len(rungs), len(LadderHeights))
	}
	for i, j := range rungs {
		height := fmt.Sprint(LadderHeights[i])
		if j["item"].(map[string]any)["height"] != height {
			t.Fatalf("rung[%d] item %v", i, j["item"])
		}
		link, ok := j["output_files"].(map[string]any)["r"+height+".mp4"].(string)
		if !ok {
			t.Fatalf("rung[%d] outputs %v", i, j["output_files"])
		}
		var video, audio bool
		for _, s := range Probe(t, Download(t, link))["streams"].([]any) {
			s := s.(map[string]any)
			video = video || s["codec_type"] == "video" && fmt.Sprint(s["height"]) == height
			audio = audio || s["codec_type"] == "audio"
		}
		if !video || !audio {
			t.Fatalf("rung[%d] r%s.mp4: video of height %s %v, audio %v", i, height, height, video, audio)
		}
		job := Call(t, "GET", api+"/api/jobs/"+j["id"].(string), key, nil).Data(t)
		ref, _ := job["pipeline"].(map[string]any)
		if ref["id"] != id || ref["step"] != "rung" || ref["item"] != float64(i) {
			t.Fatalf("rung[%d]'s job shows pipeline %v", i, job["pipeline"])
		}
	}

	// The fan-in's master playlist, opened by ffprobe through its signed
	// link: every rendition is in it.
	hls := StepJobs(PipelineStep(t, p, "hls"))
	if len(hls) != 1 {
		t.Fatalf("hls jobs %v", hls)
	}
	links := hls[0]["output_files"].(map[string]any)
	master, ok := links["master.m3u8"].(string)
	if !ok {
		t.Fatalf("hls outputs lack master.m3u8: %v", links)
	}
	out, err := exec.Command(Ffprobe, "-v", "error", "-show_entries", "stream=codec_type,height", "-of", "json", master).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v\n%s", master, err, ExitStderr(err))
	}
	var probed struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
			Height    int    `json:"height"`
		} `json:"streams"`
	}
	json.Unmarshal(out, &probed)
	heights := map[int]bool{}
	for _, s := range probed.Streams {
		if s.CodecType == "video" {
			heights[s.Height] = true
		}
	}
	for _, h := range LadderHeights {
		if !heights[h] {
			t.Fatalf("ffprobe of the master playlist has no %d p rendition: %s", h, out)
		}
		for _, name := range []string{fmt.Sprintf("v%dp/index.m3u8", h), fmt.Sprintf("v%dp/seg_000.ts", h)} {
			if _, ok := links[name]; !ok {
				t.Fatalf("hls outputs lack %s: %v", name, links)
			}
		}
	}

	// The thumbnail strip beside: three 32 px frames side by side.
	strip := StepJobs(PipelineStep(t, p, "thumbs"))[0]["output_files"].(map[string]any)["strip.jpg"].(string)
	if w := Probe(t, Download(t, strip))["streams"].([]any)[0].(map[string]any)["width"]; w != float64(96) {
		t.Fatalf("strip width %v, want 96", w)
	}

	// One pipeline webhook, when it ended: the pipeline object.
	var calls []HookCall
	testenv.Eventually(t, time.Minute, "the webhook of pipeline "+id, func() bool {
		calls = Hooks.Calls(id)
		return len(calls) > 0
	})
	if len(calls) != 1 {
		t.Fatalf("%d webhooks of pipeline %s, want exactly one", len(calls), id)
	}
	if ev := calls[0].Header.Get("X-Mediajobs-Event"); ev != "pipeline.succeeded" {
		t.Fatalf("pipeline webhook event %q", ev)
	}
	if calls[0].Job["status"] != "succeeded" || len(calls[0].Job["steps"].([]any)) != 3 {
		t.Fatalf("webhook body: %v", calls[0].Job)
	}
	if w := p["webhook"].(map[string]any); w["status"] != "delivered" || w["attempts"] != float64(1) {
		t.Fatalf("webhook state %v", w)
	}
}
