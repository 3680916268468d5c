package devstack

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"
)

func TestProgressRisesWhileRunning(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"output_files":    []string{"p.mp4"},
		"ffmpeg_commands": []string{"-re -f lavfi -i testsrc=size=160x120:rate=10 -t 20 -c:v libx264 -preset ultrafast {{p.mp4}}"},
	})
	id := r.Data(t)["id"].(string)
	var percents []float64
	deadline := time.Now().Add(90 * time.Second)
	for {
		job := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)
		if job["status"] == "succeeded" || job["status"] == "failed" {
			if job["status"] != "succeeded" || job["progress"] != nil {
				t.Fatalf("final %v (%v), progress %v", job["status"], job["error_message"], job["progress"])
			}
			break
		}
		if p, ok := job["progress"].(map[string]any); ok && job["status"] == "running" {
			if p["command_index"] != float64(1) || p["command_count"] != float64(1) {
				t.Fatalf("progress %v", p)
			}
			if pct, ok := p["percent"].(float64); ok && (len(percents) == 0 || pct != percents[len(percents)-1]) {
				percents = append(percents, pct)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("job did not finish")
		}
		time.Sleep(500 * time.Millisecond) // a client's polling interval, not a wait for a condition
	}
	if len(percents) < 3 || !sort.Float64sAreSorted(percents) || percents[0] >= 50 || percents[len(percents)-1] <= percents[0] {
		t.Fatalf("percent seen while running: %v; want at least 3 rising values", percents)
	}
	t.Logf("percent while running: %v", percents)
}

func TestFrameSequenceReturnsEveryFile(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"frame_%02d.png"},
		"ffmpeg_commands": []string{"-i {{clip}} -vf fps=2,scale=80:-1 outputs/frame_%02d.png"},
	})
	job := r.Data(t)
	if job["status"] != "succeeded" {
		t.Fatalf("%v: %v", job["status"], job["error_message"])
	}
	outs := job["output_files"].(map[string]any)
	if len(outs) < 6 {
		t.Fatalf("%d frames from a 3 s clip at 2 fps: %v", len(outs), outs)
	}
	for i := 1; i <= len(outs); i++ {
		name := fmt.Sprintf("frame_%02d.png", i)
		u, ok := outs[name].(string)
		if !ok {
			t.Fatalf("%s missing from %v", name, outs)
		}
		if s := e2e.Probe(t, e2e.Download(t, u))["streams"].([]any)[0].(map[string]any); s["codec_name"] != "png" || s["width"].(float64) != 80 {
			t.Fatalf("%s: %v", name, s)
		}
		if m := job["outputs"].(map[string]any)[name].(map[string]any); m["size_bytes"].(float64) <= 0 {
			t.Fatalf("%s metadata %v", name, m)
		}
	}
}

func TestHLSReturnsPlaylistAndEverySegment(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":  map[string]string{"clip": e2e.ClipURL},
		"output_files": []string{"index.m3u8", "seg_%03d.ts"},
		"ffmpeg_commands": []string{"-i {{clip}} -c:v libx264 -preset ultrafast -g 25 -c:a aac -f hls -hls_time 1 -hls_list_size 0 " +
			"-hls_segment_filename outputs/seg_%03d.ts outputs/index.m3u8"},
	})
	job := r.Data(t)
	if job["status"] != "succeeded" {
		t.Fatalf("%v: %v", job["status"], job["error_message"])
	}
	outs := job["output_files"].(map[string]any)
	// The playlist is served with each segment's signed link in place of its
	// relative name (a relative name would lose the signature).
	playlist := string(e2e.Call(t, "GET", outs["index.m3u8"].(string), "", nil).Body)
	links := regexp.MustCompile(`(?m)^(http\S*/outputs/(seg_\d{3}\.ts)\?\S*sig=\S+)$`).FindAllStringSubmatch(playlist, -1)
	if len(links) < 2 || regexp.MustCompile(`(?m)^seg_`).MatchString(playlist) {
		t.Fatalf("playlist lists %d segment links:\n%s", len(links), playlist)
	}
	var segs []string
	for _, l := range links {
		s := l[2]
		segs = append(segs, s)
		u, ok := outs[s].(string)
		if !ok {
			t.Fatalf("segment %s of the playlist is not in output_files %v", s, outs)
		}
		byView, byPlaylist := e2e.Call(t, "GET", u, "", nil), e2e.Call(t, "GET", l[1], "", nil)
		if byView.Status != 200 || len(byView.Body) == 0 || byPlaylist.Status != 200 || string(byPlaylist.Body) != string(byView.Body) {
			t.Fatalf("segment %s: HTTP %d by output_files, %d by the playlist", s, byView.Status, byPlaylist.Status)
		}
	}
	if len(outs) != len(segs)+1 {
		t.Fatalf("output_files has %d files, the playlist %d segments", len(outs), len(segs))
	}
}

func TestEmptySequenceFailsNamingTheOutput(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"o.mp4", "thumb_%03d.jpg"},
		"ffmpeg_commands": []string{"-i {{clip}} -t 1 -c copy {{o.mp4}}"},
	})
	job := r.Data(t)
	if msg, _ := job["error_message"].(string); job["status"] != "failed" || !strings.Contains(msg, "outputs/thumb_%03d.jpg") {
		t.Fatalf("%v: %q", job["status"], msg)
	}
}
