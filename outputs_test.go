package mediajobs_test

import (
	"encoding/json"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

func TestValidOutputName(t *testing.T) {
	for name, want := range map[string]bool{
		"out.mp4": true, "seg_%03d.ts": true, "frame_%d.png": true,
		"stream_%v/playlist.m3u8": true, "stream_%v/data%03d.ts": true, "hls/index.m3u8": true,
		"out_%v.m3u8": true, "file_%v_%03d.ts": true, "%v/index.m3u8": true,
		"": false, "/out.mp4": false, "../out.mp4": false, "a/../b.ts": false, "./a.ts": false,
		"a/b/c.ts": false, "a//b.ts": false, "a/": false, `a\b.ts`: false, ".hidden": false,
		"seg_%03d/x.ts": false, "a_%03d_%03d.ts": false, "a_%v_%v.ts": false, "a%s.ts": false,
		"a%%.ts": false, "a b.ts": false, "stream_%v/.m3u8": false,
		strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
		strings.Repeat("a", 63) + "/" + strings.Repeat("b", 64): true,
		strings.Repeat("a", 64) + "/" + strings.Repeat("b", 64): false,
	} {
		if got := mj.ValidOutputName(name); got != want {
			t.Errorf("ValidOutputName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestOutputPatternAndCheckOutputsWithDirectories(t *testing.T) {
	decl := []string{"stream_%v/playlist.m3u8", "stream_%v/data%03d.ts", "master.m3u8", "hls/index.m3u8"}
	for name, want := range map[string]bool{
		"stream_0/playlist.m3u8": true, "stream_1/data007.ts": true, "stream_720p/playlist.m3u8": true,
		"master.m3u8": true, "hls/index.m3u8": true,
		"stream_0/data.ts": false, "stream_/playlist.m3u8": false, "stream_0/sub/playlist.m3u8": false,
		"stream_0/../playlist.m3u8": false, "playlist.m3u8": false, "stream_0/master.m3u8": false,
		"hls/other.m3u8": false, "x/hls/index.m3u8": false,
	} {
		err := mj.CheckOutputs([]mj.Output{{Name: name, Size: 1}}, decl, 10)
		if (err == nil) != want {
			t.Errorf("CheckOutputs(%q): %v, want ok=%v", name, err, want)
		}
	}
	// A %v that could stand for anything still names no parent directory.
	for _, name := range []string{"../playlist.m3u8", "./playlist.m3u8", "..", ".x/playlist.m3u8", "a/b/playlist.m3u8", "/playlist.m3u8"} {
		if err := mj.CheckOutputs([]mj.Output{{Name: name}}, []string{"%v/playlist.m3u8", "%v"}, 10); err == nil {
			t.Errorf("CheckOutputs accepted %q for %%v", name)
		}
	}
	if err := mj.CheckOutputs([]mj.Output{{Name: "x0/playlist.m3u8"}}, []string{"%v/playlist.m3u8"}, 10); err != nil {
		t.Error(err)
	}
	if err := mj.CheckOutputs([]mj.Output{{Name: "stream_0/data001.ts"}, {Name: "stream_0/data001.ts"}}, decl, 10); err == nil {
		t.Error("a file reported twice was accepted")
	}
	// No outputs at all: an analysis job.
	if err := mj.CheckOutputs(nil, nil, 10); err != nil {
		t.Error(err)
	}
	if err := mj.CheckOutputs([]mj.Output{{Name: "a.mp4"}}, nil, 10); err == nil {
		t.Error("an output of a job that declared none was accepted")
	}
}

func TestBoundAnalysis(t *testing.T) {
	block := json.RawMessage(`{"input_i" : "-23.54", "input_tp" : "-7.1"}`)
	as := []mj.Analysis{
		{Command: 1, Filter: "loudnorm", Instance: "Parsed_loudnorm_0", Data: block},
		{Command: 1, Filter: "x", Data: json.RawMessage(`[1,2]`)},   // not an object
		{Command: 1, Filter: "x", Data: json.RawMessage(`{"a": `)},  // not JSON
		{Command: 2, Filter: strings.Repeat("f", 500), Data: block}, // a long name
	}
	got := mj.BoundAnalysis(as)
	if len(got) != 2 || got[0].Filter != "loudnorm" || len(got[1].Filter) != mj.MaxAnalysisNameBytes || len(as[3].Filter) != 500 {
		t.Fatalf("BoundAnalysis: %+v", got)
	}
	var many []mj.Analysis
	for i := 0; i < 1000; i++ {
		many = append(many, as[0])
	}
	got = mj.BoundAnalysis(many)
	enc, _ := json.Marshal(got)
	if len(enc) > mj.MaxAnalysisBytes || len(got) < 10 {
		t.Fatalf("%d blocks take %d bytes", len(got), len(enc))
	}
}

func TestRewriteHLS(t *testing.T) {
	outputs := map[string]string{
		"master.m3u8": "L(master)", "stream_0/playlist.m3u8": "L(p0)", "stream_1/playlist.m3u8": "L(p1)",
		"stream_0/data000.ts": "L(d0)", "stream_0/init.mp4": "L(i0)", "audio/a.m3u8": "L(a)", "stream_0/key.bin": "L(k)",
	}
	links := mj.PlaylistLinks{Output: func(n string) (string, bool) { u, ok := outputs[n]; return u, ok }}
	master := "#EXTM3U\n#EXT-X-VERSION:3\n" +
		"#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"en\",URI=\"audio/a.m3u8\"\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=140800,RESOLUTION=160x120,CODECS=\"avc1.42c00d,mp4a.40.2\"\r\n" +
		"stream_0/playlist.m3u8\r\n\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=100000\n  stream_1/playlist.m3u8  \n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=1\nhttps://cdn.example/x.m3u8\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=1\n/etc/passwd\n#EXT-X-STREAM-INF:BANDWIDTH=1\n../../x/master.m3u8\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=1\nmissing.m3u8"
	want := "#EXTM3U\n#EXT-X-VERSION:3\n" +
		"#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"en\",URI=\"L(a)\"\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=140800,RESOLUTION=160x120,CODECS=\"avc1.42c00d,mp4a.40.2\"\r\n" +
		"L(p0)\r\n\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=100000\nL(p1)\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=1\nhttps://cdn.example/x.m3u8\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=1\n/etc/passwd\n#EXT-X-STREAM-INF:BANDWIDTH=1\n../../x/master.m3u8\n" +
		"#EXT-X-STREAM-INF:BANDWIDTH=1\nmissing.m3u8"
	if got := string(mj.RewritePlaylist("master.m3u8", []byte(master), links)); got != want {
		t.Fatalf("master:\n%s\nwant:\n%s", got, want)
	}
	variant := "#EXTM3U\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXT-X-KEY:METHOD=AES-128,URI=\"key.bin\"\n#EXTINF:1.0,\ndata000.ts\n#EXTINF:1.0,\n../master.m3u8\n#EXTINF:1.0,\n../../stream_0/data000.ts\n#EXT-X-ENDLIST\n"
	want = "#EXTM3U\n#EXT-X-MAP:URI=\"L(i0)\"\n#EXT-X-KEY:METHOD=AES-128,URI=\"L(k)\"\n#EXTINF:1.0,\nL(d0)\n#EXTINF:1.0,\nL(master)\n#EXTINF:1.0,\n../../stream_0/data000.ts\n#EXT-X-ENDLIST\n"
	if got := string(mj.RewritePlaylist("stream_0/playlist.m3u8", []byte(variant), links)); got != want {
		t.Fatalf("variant:\n%s\nwant:\n%s", got, want)
	}
}

func TestRewriteDASH(t *testing.T) {
	outputs := map[string]string{"init-0.m4s": "https://s/i?a=1&b=2", "chunk-0-1.m4s": "L(c1)", "video.mp4": "L(v)"}
	links := mj.PlaylistLinks{
		Output: func(n string) (string, bool) { u, ok := outputs[n]; return u, ok },
		Dir: func(dir string) (string, string, bool) {
			return "https://gw/files/jobs/j/1/outputs/" + dir, "m=GET&s=jobs/j/1/outputs/&e=9&sig=x", dir == ""
		},
	}
	mpd := `<MPD><Period><AdaptationSet><Representation id="0">` +
		`<SegmentTemplate timescale="1000" initialization="init-$RepresentationID$.m4s" media="chunk-$RepresentationID$-$Number%05d$.m4s" startNumber="1"/>` +
		`<SegmentList><Initialization sourceURL="init-0.m4s"/><SegmentURL media="chunk-0-1.m4s"/><SegmentURL media="../../etc/x"/></SegmentList>` +
		`<BaseURL>video.mp4</BaseURL><BaseURL>https://cdn/x/</BaseURL></Representation></AdaptationSet></Period></MPD>`
	want := `<MPD><Period><AdaptationSet><Representation id="0">` +
		`<SegmentTemplate timescale="1000" initialization="https://gw/files/jobs/j/1/outputs/init-$RepresentationID$.m4s?m=GET&amp;s=jobs/j/1/outputs/&amp;e=9&amp;sig=x" media="https://gw/files/jobs/j/1/outputs/chunk-$RepresentationID$-$Number%05d$.m4s?m=GET&amp;s=jobs/j/1/outputs/&amp;e=9&amp;sig=x" startNumber="1"/>` +
		`<SegmentList><Initialization sourceURL="https://s/i?a=1&amp;b=2"/><SegmentURL media="L(c1)"/><SegmentURL media="../../etc/x"/></SegmentList>` +
		`<BaseURL>L(v)</BaseURL><BaseURL>https://cdn/x/</BaseURL></Representation></AdaptationSet></Period></MPD>`
	if got := string(mj.RewritePlaylist("manifest.mpd", []byte(mpd), links)); got != want {
		t.Fatalf("mpd:\n%s\nwant:\n%s", got, want)
	}
}
