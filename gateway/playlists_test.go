package gateway

import (
	"context"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// get fetches a link the gateway handed out (http://gw.test/...) from the app.
func (h *harness) get(link string) (int, string, string) {
	h.t.Helper()
	u, err := url.Parse(link)
	if err != nil || u.Host != "gw.test" {
		h.t.Fatalf("not a gateway link: %q", link)
	}
	resp, err := h.app.Test(httptest.NewRequest("GET", u.RequestURI(), nil), 10000)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// A published HLS ladder's playlists are served with every reference to another
// output replaced by its signed link, which the client can follow as is; nothing
// outside the job's outputs is linked, whatever the playlist names.
func TestPlaylistsServedWithSignedReferences(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	req := with("output_files", []string{"master.m3u8", "stream_%v/playlist.m3u8", "stream_%v/data%03d.ts"})
	req["ffmpeg_commands"] = []string{"-i {{video}} -f hls -var_stream_map v:0 -master_pl_name master.m3u8 -hls_segment_filename outputs/stream_%v/data%03d.ts outputs/stream_%v/playlist.m3u8"}
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	// Another job's file, which a hostile playlist names.
	other := "jobs/00000000-0000-0000-0000-000000000000/1/outputs/secret.ts"
	prefix := "jobs/" + id + "/1/0123abcd-0000-0000-0000-000000000000/outputs/"
	files := map[string]string{
		"master.m3u8": "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=140800\nstream_0/playlist.m3u8\n" +
			"#EXT-X-STREAM-INF:BANDWIDTH=1\n../../../../00000000-0000-0000-0000-000000000000/1/outputs/secret.ts\n",
		"stream_0/playlist.m3u8": "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\ndata000.ts\n#EXTINF:1.0,\ndata001.ts\n#EXTINF:1.0,\nnot-published.ts\n#EXT-X-ENDLIST\n",
		"stream_0/data000.ts":    "segment 0",
		"stream_0/data001.ts":    "segment 1",
	}
	var outs []mj.Output
	for name, content := range files {
		if _, err := h.gw.Blobs.Put(ctx, prefix+name, strings.NewReader(content), 0); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, mj.Output{Name: name, Key: prefix + name, Size: int64(len(content))})
	}
	h.gw.Blobs.Put(ctx, prefix+"stream_0/not-published.ts", strings.NewReader("x"), 0)
	h.gw.Blobs.Put(ctx, other, strings.NewReader("another job's"), 0)
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	if _, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Outputs = mj.StatusSucceeded, outs; return nil }); err != nil {
		t.Fatal(err)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	links := body["data"].(map[string]any)["output_files"].(map[string]any)
	if len(links) != 4 {
		t.Fatalf("output_files %v", links)
	}

	status, ctype, master := h.get(links["master.m3u8"].(string))
	if status != 200 || ctype != "application/vnd.apple.mpegurl" {
		t.Fatalf("master: HTTP %d %s %s", status, ctype, master)
	}
	lines := strings.Split(master, "\n")
	if lines[2] == "stream_0/playlist.m3u8" || !strings.HasPrefix(lines[2], "http://gw.test/files/"+prefix+"stream_0/playlist.m3u8?") {
		t.Fatalf("the variant is not its signed link:\n%s", master)
	}
	if !strings.Contains(master, "\n../../../../00000000-0000-0000-0000-000000000000/1/outputs/secret.ts\n") || strings.Contains(master, "secret.ts?") {
		t.Fatalf("a reference outside the job's outputs was rewritten:\n%s", master)
	}
	status, _, variant := h.get(lines[2])
	if status != 200 {
		t.Fatalf("variant: HTTP %d %s", status, variant)
	}
	var segs []string
	for _, l := range strings.Split(variant, "\n") {
		if strings.HasPrefix(l, "http://") {
			segs = append(segs, l)
		}
	}
	if len(segs) != 2 || !strings.Contains(variant, "\nnot-published.ts\n") {
		t.Fatalf("variant:\n%s", variant)
	}
	for i, s := range segs {
		status, _, got := h.get(s)
		if status != 200 || got != files["stream_0/data00"+string(rune('0'+i))+".ts"] {
			t.Fatalf("segment %d: HTTP %d %q", i, status, got)
		}
	}
	// A tampered link is refused, a playlist's as any other.
	if status, _, _ := h.get(strings.Replace(lines[2], "sig=", "sig=x", 1)); status != 403 {
		t.Fatalf("tampered playlist link: HTTP %d", status)
	}
}

// A ladder ffmpeg wrote, published as a job's outputs, plays by its master
// playlist's link: ffprobe finds both variants and decodes a variant's frames
// through the signed links the served playlists hold.
func TestPlaylistLadderPlaysByItsLink(t *testing.T) {
	ff, fp := testenv.Binary(t, "ffmpeg"), testenv.Binary(t, "ffprobe")
	h := newHarness(t)
	base := h.serve()
	h.gw.Signer.Base = base
	ctx := context.Background()
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, "outputs"), 0o755)
	gen := exec.Command(ff, "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=2:size=160x120:rate=10", "-f", "lavfi", "-i", "sine=duration=2",
		"-filter_complex", "[0:v]split=2[a][b];[a]scale=160:120[v0];[b]scale=80:60[v1]", "-map", "[v0]", "-map", "1:a", "-map", "[v1]", "-map", "1:a",
		"-c:v", "libx264", "-preset", "ultrafast", "-b:v:0", "200k", "-b:v:1", "100k", "-c:a", "aac", "-g", "10", "-f", "hls", "-hls_time", "1",
		"-hls_playlist_type", "vod", "-master_pl_name", "master.m3u8", "-hls_segment_filename", "outputs/stream_%v/data%03d.ts",
		"-var_stream_map", "v:0,a:0 v:1,a:1", "outputs/stream_%v/playlist.m3u8")
	gen.Dir = work
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, out)
	}

	req := with("output_files", []string{"master.m3u8", "stream_%v/playlist.m3u8", "stream_%v/data%03d.ts"})
	req["ffmpeg_commands"] = []string{"-i {{video}} -f hls -var_stream_map v:0 -master_pl_name master.m3u8 -hls_segment_filename outputs/stream_%v/data%03d.ts outputs/stream_%v/playlist.m3u8"}
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	prefix := "jobs/" + id + "/1/outputs/"
	var outs []mj.Output
	filepath.WalkDir(filepath.Join(work, "outputs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name, _ := filepath.Rel(filepath.Join(work, "outputs"), p)
		f, _ := os.Open(p)
		defer f.Close()
		n, err := h.gw.Blobs.Put(ctx, prefix+name, f, 0)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, mj.Output{Name: filepath.ToSlash(name), Key: prefix + filepath.ToSlash(name), Size: n})
		return nil
	})
	if err := mj.CheckOutputs(outs, []string{"master.m3u8", "stream_%v/playlist.m3u8", "stream_%v/data%03d.ts"}, 1000); err != nil || len(outs) < 5 {
		t.Fatalf("%d outputs: %v", len(outs), err)
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	if _, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Outputs = mj.StatusSucceeded, outs; return nil }); err != nil {
		t.Fatal(err)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	master := body["data"].(map[string]any)["output_files"].(map[string]any)["master.m3u8"].(string)
	if !strings.HasPrefix(master, base+"/files/") {
		t.Fatalf("master link %s", master)
	}
	out, err := exec.Command(fp, "-v", "error", "-show_entries", "stream=codec_type,width", "-of", "csv=p=0", master).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "video,160") || !strings.Contains(string(out), "video,80") || !strings.Contains(string(out), "audio") {
		t.Fatalf("ffprobe %s: %v\n%s", master, err, out)
	}
	out, err = exec.Command(fp, "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", master).CombinedOutput()
	if n, _ := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), "\n")[0])); err != nil || n <= 0 {
		t.Fatalf("ffprobe -count_frames %s: %v\n%s", master, err, out)
	}
	// What the rewrite is for: a reference resolved against the master's link, as a
	// player would resolve ffmpeg's relative name, has no signature.
	mu, _ := url.Parse(master)
	if status, _, _ := h.get(strings.Replace(mu.ResolveReference(&url.URL{Path: "stream_0/playlist.m3u8"}).String(), base, "http://gw.test", 1)); status != 403 {
		t.Fatalf("a relative reference followed from the master's link: HTTP %d, want 403", status)
	}
}

// A playlist is whatever the user's ffmpeg wrote: one of one-letter references
// to an output is rewritten only up to maxPlaylistRefs references, so what the
// gateway sends stays bounded, and the rest are left as written.
func TestHostilePlaylistRewriteIsBounded(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	req := with("output_files", []string{"p.m3u8", "a"})
	req["ffmpeg_commands"] = []string{"-i {{video}} -c copy -f hls outputs/p.m3u8"}
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	prefix := "jobs/" + id + "/1/0123abcd-0000-0000-0000-000000000000/outputs/"
	playlist := strings.Repeat("a\n", maxPlaylistRefs+1000)
	var outs []mj.Output
	for name, content := range map[string]string{"p.m3u8": playlist, "a": "segment"} {
		if _, err := h.gw.Blobs.Put(ctx, prefix+name, strings.NewReader(content), 0); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, mj.Output{Name: name, Key: prefix + name, Size: int64(len(content))})
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	if _, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Outputs = mj.StatusSucceeded, outs; return nil }); err != nil {
		t.Fatal(err)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	link := body["data"].(map[string]any)["output_files"].(map[string]any)["p.m3u8"].(string)
	status, _, got := h.get(link)
	if status != 200 {
		t.Fatalf("HTTP %d", status)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	rewritten := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "http://") {
			rewritten++
		} else if l != "a" {
			t.Fatalf("unexpected line %q", l)
		}
	}
	if len(lines) != maxPlaylistRefs+1000 || rewritten != maxPlaylistRefs {
		t.Fatalf("%d lines, %d rewritten; want %d and %d", len(lines), rewritten, maxPlaylistRefs+1000, maxPlaylistRefs)
	}
}
