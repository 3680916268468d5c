package cluster

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"
)

// TestFontsWithoutFontFile: drawtext without a fontfile and a subtitles= burn-in
// from an .srt input run on both drivers, the worker image carrying fontconfig
// and DejaVu (deploy/worker/build-local.sh) and the bubblewrap sandbox binding
// the host's (docs/containment.md). Each frame is compared with the same frame
// drawn without text: libass renders nothing, and says so only in a warning, when
// it finds no font, so a published PNG identical to the plain one is a failure.
func TestFontsWithoutFontFile(t *testing.T) {
	srt := "1\n00:00:00,000 --> 00:00:03,000\nHello from the subtitles\n"
	subs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(srt)) }))
	defer subs.Close()

	for _, driver := range []string{"raw_exec", "docker"} {
		t.Run(driver, func(t *testing.T) {
			c, machine := driverCluster(t, driver)
			frame := "-ss 1 -frames:v 1"
			id := c.Create(map[string]any{
				"input_files":  map[string]string{"in": c.InURL + "?job=fonts-" + driver, "subs.srt": subs.URL + "/subs.srt"},
				"output_files": []string{"plain.png", "drawtext.png", "subs.png", "burned.mp4"},
				"ffmpeg_commands": []string{
					"-i {{in}} " + frame + " {{plain.png}}",
					"-i {{in}} -vf drawtext=text='hello':fontsize=40:fontcolor=white:x=10:y=10 " + frame + " {{drawtext.png}}",
					"-i {{in}} -vf subtitles={{subs.srt}} " + frame + " {{subs.png}}",
					"-i {{in}} -vf \"subtitles={{subs.srt}}:force_style='FontName=DejaVu Sans,FontSize=24',drawtext=text='hello'\" -c:v libx264 -preset ultrafast -c:a copy {{burned.mp4}}",
				},
				"machine": machine,
			})
			j := c.WaitStatus(id, 180*time.Second, "succeeded", "failed")
			if j["status"] != "succeeded" {
				t.Fatalf("%s: job %v: %v\nlogs: %v", driver, j["status"], j["error_message"], j["logs"])
			}
			links := j["output_files"].(map[string]any)
			png := map[string][]byte{}
			for _, name := range []string{"plain.png", "drawtext.png", "subs.png"} {
				p := e2e.Download(t, links[name].(string))
				s := e2e.Probe(t, p)["streams"].([]any)[0].(map[string]any)
				if s["codec_name"] != "png" || s["width"] != float64(320) {
					t.Fatalf("%s: %s probes as %v", driver, name, s)
				}
				png[name], _ = os.ReadFile(p)
			}
			if bytes.Equal(png["drawtext.png"], png["plain.png"]) {
				t.Errorf("%s: drawtext drew nothing: its frame is the plain one", driver)
			}
			if bytes.Equal(png["subs.png"], png["plain.png"]) {
				t.Errorf("%s: subtitles= drew nothing (libass found no font): its frame is the plain one", driver)
			}
			m := e2e.Probe(t, e2e.Download(t, links["burned.mp4"].(string)))
			if s := m["streams"].([]any)[0].(map[string]any); s["codec_name"] != "h264" || s["width"] != float64(320) {
				t.Fatalf("%s: burned.mp4 probes as %v", driver, s)
			}
		})
	}
}
