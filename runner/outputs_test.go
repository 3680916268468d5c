package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/sys/unix"
)

// An HLS ladder writes one directory per variant and a master playlist next to
// them; each file is collected, probed and uploaded under its name relative to
// outputs/, and the result passes the dispatcher's check.
func TestRunHLSLadderOutputsInDirectories(t *testing.T) {
	data := clip(t)
	srv, up := newServer(t, map[string][]byte{"clip.mp4": data})
	declared := []string{"master.m3u8", "stream_%v/playlist.m3u8", "stream_%v/data%03d.ts"}
	res := run(t, srv, mj.Manifest{
		InputFiles:  map[string]string{"clip": srv.URL + "/in/clip.mp4"},
		OutputNames: declared,
		FFmpegCommands: []string{`-i {{clip}} -filter_complex "[0:v]split=2[a][b];[a]scale=160:120[v0];[b]scale=80:60[v1]" ` +
			`-map [v0] -map [v1] -c:v libx264 -preset ultrafast -b:v:0 200k -b:v:1 100k -g 5 -f hls -hls_time 0.5 -hls_playlist_type vod ` +
			`-master_pl_name master.m3u8 -hls_segment_filename outputs/stream_%v/data%03d.ts -var_stream_map "v:0 v:1" outputs/stream_%v/playlist.m3u8`},
		AllowLoopback: true,
	})
	if !res.Succeeded {
		t.Fatalf("failed: %s", res.ErrorMessage)
	}
	names := map[string]bool{}
	for _, o := range res.Outputs {
		names[o.Name] = true
		if b, ok := up.files["outputs/"+o.Name]; !ok || int64(len(b)) != o.Size || o.Size == 0 {
			t.Errorf("%s: reported %d bytes, uploaded %d (%v)", o.Name, o.Size, len(b), ok)
		}
	}
	for _, want := range []string{"master.m3u8", "stream_0/playlist.m3u8", "stream_1/playlist.m3u8", "stream_0/data000.ts", "stream_1/data000.ts"} {
		if !names[want] {
			t.Errorf("%s not among the outputs %v", want, names)
		}
	}
	if err := mj.CheckOutputs(res.Outputs, declared, 1000); err != nil {
		t.Fatal(err)
	}
	if master := string(up.files["outputs/master.m3u8"]); !strings.Contains(master, "stream_0/playlist.m3u8") || !strings.Contains(master, "stream_1/playlist.m3u8") {
		t.Fatalf("master playlist:\n%s", master)
	}
}

// Only regular files in outputs/ and one directory below count: a link (to a
// directory or a file), a FIFO, or a file two levels down is not an output.
func TestCollectOutputsSkipsLinksAndDeepFiles(t *testing.T) {
	work := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "playlist.m3u8"), []byte("host file"), 0o644)
	mk := func(rel string) string {
		p := filepath.Join(work, "outputs", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	os.WriteFile(mk("stream_0/playlist.m3u8"), []byte("#EXTM3U"), 0o644)
	os.Symlink(outside, mk("stream_1"))                                               // a directory link
	os.Symlink(filepath.Join(outside, "playlist.m3u8"), mk("stream_2/playlist.m3u8")) // a file link
	if err := unix.Mkfifo(mk("stream_3/playlist.m3u8"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(mk("stream_4/deeper/playlist.m3u8"), []byte("#EXTM3U"), 0o644)
	os.WriteFile(mk("stream_5/playlist.m3u8"), []byte("#EXTM3U"), 0o644)
	os.WriteFile(mk("master.m3u8"), []byte("#EXTM3U"), 0o644)
	os.Symlink(outside, mk("linked.m3u8"))

	files, err := collectOutputs(work, []string{"stream_%v/playlist.m3u8", "master.m3u8"})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if want := []string{"master.m3u8", "stream_0/playlist.m3u8", "stream_5/playlist.m3u8"}; !reflect.DeepEqual(files, want) {
		t.Fatalf("collected %v, want %v", files, want)
	}
	if _, err := collectOutputs(work, []string{"linked.m3u8"}); err == nil || !strings.Contains(err.Error(), "produced no outputs/linked.m3u8") {
		t.Fatalf("a link collected as an output: %v", err)
	}
	// The upload opens nothing through a link, even one put in place of a
	// collected directory afterwards.
	root, err := os.OpenRoot(work)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if f, err := openOutput(root, "stream_0/playlist.m3u8"); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	os.RemoveAll(filepath.Join(work, "outputs", "stream_0"))
	os.Symlink(outside, filepath.Join(work, "outputs", "stream_0"))
	if f, err := openOutput(root, "stream_0/playlist.m3u8"); err == nil {
		f.Close()
		t.Fatal("opened an output through a directory link")
	}
}

// A job without output files succeeds when ffmpeg does, and reports the JSON
// that loudnorm printed.
func TestRunAnalysisWithoutOutputs(t *testing.T) {
	srv, up := newServer(t, nil)
	res := run(t, srv, mj.Manifest{
		OutputNames:    []string{},
		FFmpegCommands: []string{"-f lavfi -i sine=frequency=440:duration=2 -af loudnorm=I=-16:TP=-1.5:LRA=11:print_format=json -f null -"},
	})
	if !res.Succeeded || len(res.Outputs) != 0 {
		t.Fatalf("succeeded %v (%s), outputs %v", res.Succeeded, res.ErrorMessage, res.Outputs)
	}
	if len(res.Analysis) != 1 {
		t.Fatalf("analysis %+v", res.Analysis)
	}
	a := res.Analysis[0]
	var data map[string]string
	if err := json.Unmarshal(a.Data, &data); err != nil || a.Command != 1 || a.Filter != "loudnorm" || a.Instance != "Parsed_loudnorm_0" {
		t.Fatalf("analysis %+v (%v)", a, err)
	}
	for _, k := range []string{"input_i", "input_tp", "input_lra", "input_thresh", "target_offset"} {
		if data[k] == "" {
			t.Errorf("loudnorm's %s missing from %v", k, data)
		}
	}
	var reported mj.Result
	if err := json.Unmarshal(up.files["result.json"], &reported); err != nil || len(reported.Analysis) != 1 || len(reported.Logs) != 1 {
		t.Fatalf("uploaded result %s (%v)", up.files["result.json"], err)
	}
}

func TestParseAnalysis(t *testing.T) {
	log := "[info] Input #0, lavfi, from 'sine':\n" +
		"[Parsed_loudnorm_0 @ 0x55a019d11a80] [info] \n{\n\t\"input_i\" : \"-21.75\",\n\t\"input_tp\" : \"-18.06\"\n}\n" +
		"[info] {\"not\": \"a filter's\"}\n" +
		"[Parsed_ebur128_1 @ 0x55a019d11a90] [info] Summary:\n  Integrated loudness:\n" +
		"[Parsed_custom_filter_2 @ 0x5] [info] {\"nested\": {\"a\": [1, 2]},\r\n \"b\": true}\r\n" +
		"[Parsed_broken_3 @ 0x6] [info] \n{\n\"a\": \n[info] more\n"
	got := parseAnalysis([]byte(log), 2)
	want := []mj.Analysis{
		{Command: 2, Filter: "loudnorm", Instance: "Parsed_loudnorm_0", Data: json.RawMessage(`{"input_i":"-21.75","input_tp":"-18.06"}`)},
		{Command: 2, Filter: "custom_filter", Instance: "Parsed_custom_filter_2", Data: json.RawMessage(`{"nested":{"a":[1,2]},"b":true}`)},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d blocks: %+v", len(got), got)
	}
	for i := range want {
		if got[i].Filter != want[i].Filter || got[i].Instance != want[i].Instance || got[i].Command != 2 || string(got[i].Data) != string(want[i].Data) {
			t.Errorf("block %d: %+v (%s), want %+v (%s)", i, got[i], got[i].Data, want[i], want[i].Data)
		}
	}
}
