package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/testenv"
)

var newSpec = Spec{
	Inputs: map[string]bool{"video": true, "a.ts": true, "b.ts": true, "list.txt": true,
		"img001.png": true, "img002.png": true, "frame-7.jpg": true, "subs.srt": true},
	Outputs: map[string]bool{"out.mp4": true, "stream_%v/playlist.m3u8": true, "stream_%v/data%03d.ts": true,
		"master.m3u8": true, "out.gif": true},
}

// TestPrepareOpened: the forms the sandbox contains run, with the argv ffmpeg gets.
func TestPrepareOpened(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// The concat demuxer with -safe 0, the concat protocol over job files.
		{"-f concat -safe 0 -i inputs/list.txt -c copy outputs/out.mp4", ""},
		{"-i concat:inputs/a.ts|inputs/b.ts -c copy outputs/out.mp4", ""},
		{"-i 'concat:inputs/a.ts|mid.ts' -c copy outputs/out.mp4", ""},
		// The null sink: /dev/null, and NUL from Windows scripts as /dev/null.
		{"-y -i inputs/video -c:v libx264 -pass 1 -an -f null /dev/null", ""},
		{"-i inputs/video -c:v libvpx-vp9 -b:v 2M -pass 1 -an -f webm NUL", "-i|inputs/video|-c:v|libvpx-vp9|-b:v|2M|-pass|1|-an|-f|null|/dev/null"},
		{"-i inputs/video -c:v libx264 -pass 1 -f mp4 /dev/null", "-i|inputs/video|-c:v|libx264|-pass|1|-f|null|/dev/null"},
		{"-f mp4 -i inputs/video -pass 1 -f:v mp4 NUL", "-f|mp4|-i|inputs/video|-pass|1|-f:v|null|/dev/null"},
		{"-i inputs/video -af loudnorm=I=-16:TP=-1.5:LRA=11:print_format=json -f null -", ""},
		{"-i inputs/video -map 0 -f tee [f=mp4]outputs/out.mp4|[f=null]/dev/null", ""},
		// Image sequences and globs over declared inputs.
		{"-framerate 1 -i inputs/img%03d.png -c:v libx264 -pix_fmt yuv420p outputs/out.mp4", ""},
		{"-start_number 1 -i inputs/img%03d.png outputs/out.mp4", "-start_number|1|-i|inputs/img%03d.png|outputs/out.mp4"},
		{"-pattern_type glob -framerate 1 -i 'inputs/*.png' outputs/out.mp4", ""},
		{"-i inputs/frame-%d.jpg outputs/out.mp4", ""},
		// HLS ladders: %v directories, master playlist beside them.
		{"-i inputs/video -map 0:v -map 0:v -c:v libx264 -f hls -var_stream_map 'v:0 v:1' -master_pl_name master.m3u8 " +
			"-hls_segment_filename outputs/stream_%v/data%03d.ts outputs/stream_%v/playlist.m3u8", ""},
		// ffmpeg's stream-type prefixed codec options.
		{"-i inputs/video -vcodec libx264 -vb 2M -vprofile high -vlevel 4.1 -ab 128k -aq 2 -vtag avc1 outputs/out.mp4", ""},
		// Text that is never opened: URLs and paths there are just text.
		{"-i inputs/video -f hls -hls_base_url https://cdn.example.com/v/ -hls_enc_key_url https://k.example/k outputs/stream_%v/playlist.m3u8", ""},
		{"-i inputs/video -metadata comment=https://example.com/src -metadata title=/not/a/path outputs/out.mp4", ""},
		{`-i inputs/video -vf "drawtext=text='see http\://example.com':x=10:y=10" outputs/out.mp4`, ""},
		{`-i inputs/video -vf "drawtext=fontfile=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf:text=hi" outputs/out.mp4`, ""},
		{`-i inputs/video -vf "subtitles=inputs/subs.srt:force_style='FontName=DejaVu Sans'" outputs/out.mp4`, ""},
		// The playlist-reading options the sandbox contains.
		{"-allowed_extensions ALL -i inputs/list.txt outputs/out.mp4", ""},
		{"-protocol_whitelist file,crypto,concat -i inputs/list.txt outputs/out.mp4", ""},
		{"-f hls -hls_key_info_file inputs/list.txt -i inputs/video outputs/stream_%v/playlist.m3u8", ""},
		// fifo into tee: the tee list is checked.
		{"-i inputs/video -map 0 -f fifo -fifo_format tee [f=mp4]outputs/out.mp4|[f=null]/dev/null", ""},
		// GIFs with palettes.
		{`-i inputs/video -filter_complex "fps=10,scale=320:-1:flags=lanczos,split[a][b];[a]palettegen[p];[b][p]paletteuse" outputs/out.gif`, ""},
	} {
		got, err := Prepare(c.in, newSpec)
		if err != nil {
			t.Errorf("Prepare(%q): %v", c.in, err)
			continue
		}
		if c.want != "" && strings.Join(got, "|") != c.want {
			t.Errorf("Prepare(%q) = %q, want %q", c.in, strings.Join(got, "|"), c.want)
		}
	}
}

// TestPrepareRefusalsTeach: each refusal names the word, the reason and what to
// write instead.
func TestPrepareRefusalsTeach(t *testing.T) {
	for _, c := range []struct{ in, word, why, instead string }{
		{"-progress pipe:1 -i inputs/video outputs/out.mp4", `"-progress"`, "the runner owns -progress", "instead, drop it"},
		{"-fpre inputs/list.txt -i inputs/video outputs/out.mp4", `"-fpre"`, "applies options from a file", "instead, write the options on the command line"},
		{"-filter_complex_script inputs/list.txt -i inputs/video outputs/out.mp4", `"-filter_complex_script"`, "reads a filter graph", "instead, give the graph with -filter_complex"},
		{"-i inputs/video -vf frei0r=distort0r outputs/out.mp4", `"frei0r"`, "loads a plugin", "instead, commands cannot load code"},
		{"-i inputs/video -af 'volume=1,ladspa=f=x' outputs/out.mp4", `"ladspa"`, "loads a plugin", "instead"},
		{"-i inputs/video -vf zmq outputs/out.mp4", `"zmq"`, "network listener", "instead, send timed commands with sendcmd"},
		{"-f v4l2 -i video0 outputs/out.mp4", "-f v4l2", "devices", "instead, put the media in input_files"},
		{"-i inputs/video -listen 1 outputs/out.mp4", `"-listen"`, "without network", "instead, put each file in input_files"},
		{"-protocol_whitelist file,http,tcp -i inputs/list.txt outputs/out.mp4", "-protocol_whitelist", `protocol "http" needs the network`, "instead, put each file in input_files"},
		{"-i http://example.com/a.mp4 outputs/out.mp4", `"http://example.com/a.mp4"`, "URLs and protocol prefixes", "instead, put each file in input_files"},
		{"-i /etc/passwd outputs/out.mp4", `"/etc/passwd"`, "absolute paths", "instead, use inputs/<name>"},
		{"-i inputs/video outputs/other.mp4", `"outputs/other.mp4"`, "not an entry of output_files", `instead, add "other.mp4" to output_files`},
		{"-i inputs/nope.mp4 outputs/out.mp4", `"inputs/nope.mp4"`, "not a key of input_files", `instead, add "nope.mp4" to input_files`},
		{"-framerate 1 -i inputs/pic%03d.png outputs/out.mp4", `"inputs/pic%03d.png"`, "matches no key of input_files", "instead, declare each file"},
		{"-i inputs/video -f hls -master_pl_name main.m3u8 outputs/stream_%v/playlist.m3u8", `"main.m3u8"`, "not an entry of output_files", `add "main.m3u8" to output_files`},
		{"-i inputs/video -vsources 1 outputs/out.mp4", `-vsources`, "", ""}, // not a codec option: deferred, not refused
	} {
		_, err := Prepare(c.in, newSpec)
		if c.why == "" {
			if err != nil {
				t.Errorf("Prepare(%q): %v", c.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("Prepare(%q) allowed", c.in)
			continue
		}
		for _, part := range []string{c.word, c.why, c.instead} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("Prepare(%q) err = %v, want it to hold %q", c.in, err, part)
			}
		}
	}
}

// TestPrepareNewFormsRefused: the opened forms stay inside the job.
func TestPrepareNewFormsRefused(t *testing.T) {
	for _, c := range []struct{ in, errPart string }{
		{"-i concat:inputs/a.ts|../x.ts outputs/out.mp4", `".."`},
		{"-i concat:inputs/a.ts|/etc/passwd outputs/out.mp4", "absolute paths"},
		{"-i concat:inputs/a.ts|inputs/zz.ts outputs/out.mp4", "not a key of input_files"},
		{"-i concat:inputs/a.ts|http://x/ outputs/out.mp4", "protocol prefixes"},
		{"-pattern_type glob -i 'inputs/*/../../x' outputs/out.mp4", `".."`},
		{"-pattern_type glob -i '/etc/*' outputs/out.mp4", "absolute paths"},
		{"-i inputs/../img%03d.png outputs/out.mp4", `".."`},
		{"-i inputs/video -f null /dev/zero", "absolute paths"},
		{"-i inputs/video -f null /dev/nullx", "absolute paths"},
		{"-i inputs/video -f hls -master_pl_name ../m.m3u8 outputs/stream_%v/playlist.m3u8", `".."`},
		{"-i inputs/video -f hls -master_pl_name /tmp/m.m3u8 outputs/stream_%v/playlist.m3u8", "absolute paths"},
		{"-i inputs/video -f hls outputs/stream_%v/other.m3u8", "not an entry of output_files"},
		{"-i inputs/video -f hls -hls_segment_filename outputs/stream_%v/x%03d.ts outputs/stream_%v/playlist.m3u8", "not an entry of output_files"},
		// fifo into tee is read as tee, nested lists too.
		{"-i inputs/video -map 0 -f fifo -fifo_format tee [f=mp4]/etc/x|outputs/out.mp4", "absolute paths"},
		{"-i inputs/video -map 0 -f fifo -fifo_format tee [f=mp4]outputs/out.mp4|[f=hls:hls_segment_filename=/tmp/s%d.ts]outputs/x.m3u8", "absolute paths"},
		{`-i inputs/video -map 0 -f tee "[f=fifo:fifo_format=tee]outputs/out.mp4\|/etc/x"`, "absolute paths"},
		{`-i inputs/video -map 0 -f tee "[f=tee]outputs/out.mp4\|[f=mp4]../x"`, `".."`},
		{`-i inputs/video -map 0 -f tee "[use_fifo=1:fifo_options=fifo_format\=tee]outputs/out.mp4\|/etc/x"`, "absolute paths"},
		{"-i inputs/video -map 0 -f fifo -fifo_format fifo -format_opts fifo_format=tee [f=mp4]/etc/x", "absolute paths"},
		{"-i inputs/video -map 0 -f fifo -fifo_format tee [progress=x]outputs/out.mp4", `"progress" is not allowed`},
		// Text options are text only where ffmpeg takes text.
		{`-i inputs/video -vf "drawtext=textfile=/etc/passwd:text=x" outputs/out.mp4`, "absolute paths"},
		{`-i inputs/video -vf "drawtext=fontfile=/usr/share/fonts/../../../etc/passwd" outputs/out.mp4`, `".."`},
		{`-i inputs/video -vf "subtitles=http\\\://x/s.srt" outputs/out.mp4`, "protocol prefixes"},
		// v/a/s-prefixed names are refused like the option they stand for.
		{"-i inputs/video -vomx_libname x outputs/out.mp4", `"-vomx_libname" is not allowed`},
		{"-i inputs/video -alisten 1 outputs/out.mp4", `"-alisten" is not allowed`},
	} {
		_, err := Prepare(c.in, newSpec)
		if err == nil || !strings.Contains(err.Error(), c.errPart) {
			t.Errorf("Prepare(%q) err=%v, want error containing %q", c.in, err, c.errPart)
		}
	}
}

// TestDeferredToTheWorker: an option or filter the service's table does not know
// is deferred at the gateway (Spec.Worker nil) and checked on the worker against
// its own ffmpeg: here one that knows an option and a filter more than the table.
func TestDeferredToTheWorker(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	// A newer ffmpeg: the real one's help, plus an AVOption and a filter.
	fake := filepath.Join(t.TempDir(), "ffmpeg")
	os.WriteFile(fake, []byte(`#!/bin/sh
case "$*" in
*"-h full"*) "`+ff+`" "$@"; echo '  -mj_new_option    <int>        E..V....... a newer ffmpeg'"'"'s option' ;;
*-filters*) "`+ff+`" "$@"; echo ' ... mj_newfilter      V->V       a newer ffmpeg'"'"'s filter' ;;
*) exec "`+ff+`" "$@" ;;
esac
`), 0o755)
	worker := newSpec
	worker.Worker = WorkerOptions(fake)
	old := newSpec
	old.Worker = WorkerOptions(ff)
	for _, c := range []struct {
		in                   string
		gateway, new, oldErr string // "" allowed, else a part of the error
	}{
		{"-i inputs/video -mj_new_option 3 outputs/out.mp4", "", "", `unknown option "-mj_new_option": neither ffmpeg`},
		{"-i inputs/video -vf mj_newfilter=x=1 outputs/out.mp4", "", "", `unknown filter "mj_newfilter": neither ffmpeg`},
		{"-i inputs/video -mj_typo 3 outputs/out.mp4", "", `unknown option "-mj_typo"`, `unknown option "-mj_typo"`},
		{"-i inputs/video -vf mj_typo outputs/out.mp4", "", `unknown filter "mj_typo"`, `unknown filter "mj_typo"`},
		// Deferred values are still checked like any word.
		{"-i inputs/video -mj_new_option /etc/passwd outputs/out.mp4", "absolute paths", "absolute paths", "unknown option"},
		// A deferred option before a known one takes no value: -i is still read.
		{"-mj_flag -i /etc/passwd outputs/out.mp4", "absolute paths", "unknown option", "unknown option"},
	} {
		for _, r := range []struct {
			spec Spec
			want string
		}{{newSpec, c.gateway}, {worker, c.new}, {old, c.oldErr}} {
			_, err := Prepare(c.in, r.spec)
			switch {
			case r.want == "" && err != nil:
				t.Errorf("Prepare(%q) on %v: %v", c.in, r.spec.Worker, err)
			case r.want != "" && (err == nil || !strings.Contains(err.Error(), r.want)):
				t.Errorf("Prepare(%q) on %v: err=%v, want %q", c.in, r.spec.Worker, err, r.want)
			}
		}
	}
	if v := old.Worker.Version(); v != ffmpegVersion {
		t.Errorf("worker version %q, want %q", v, ffmpegVersion)
	}
	// Read once per binary.
	if WorkerOptions(fake) != worker.Worker {
		t.Error("WorkerOptions made a second table for the same binary")
	}
}

// TestGetTokenLinear: a token copies itself, never the rest of the string.
func TestGetTokenLinear(t *testing.T) {
	s := strings.Repeat("x=1:", 1<<14)
	allocs := testing.AllocsPerRun(10, func() {
		for r := s; r != ""; {
			_, r = getToken(r, ":")
			if r != "" {
				r = r[1:]
			}
		}
	})
	if allocs > 0 {
		t.Errorf("getToken allocated %v times over plain tokens, want 0", allocs)
	}
}

// 64 KiB commands: an ordinary one, and ones made to make a parser quadratic.
func bigCommands() map[string]string {
	const size = 64 << 10
	fill := func(prefix, unit, suffix string) string {
		n := (size - len(prefix) - len(suffix)) / len(unit)
		return prefix + strings.Repeat(unit, n) + suffix
	}
	return map[string]string{
		"ordinary": fill("-i inputs/video ", "-map 0:v -c:v libx264 -crf 23 -metadata title=x ", "outputs/out.mp4"),
		"dict":     fill("-i inputs/video -f hls -hls_segment_options ", "x=1:", "x=1 outputs/stream_%v/playlist.m3u8"),
		"graph":    fill("-i inputs/video -vf '", "scale=2:2,", "null' outputs/out.mp4"),
		"escaped":  fill(`-i inputs/video -vf "`, `drawtext=text='a\,b':x=1,`, `null" outputs/out.mp4`),
		"tee":      fill("-i inputs/video -map 0 -f tee '", "[f=mp4:movflags=+faststart]outputs/out.mp4|", "outputs/out.mp4'"),
	}
}

func BenchmarkPrepare64K(b *testing.B) {
	for name, c := range bigCommands() {
		b.Run(name, func(b *testing.B) {
			if _, err := Prepare(c, newSpec); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(c)))
			b.ReportAllocs()
			for b.Loop() {
				Prepare(c, newSpec)
			}
		})
	}
}

// ffmpeg 7 reads a filter option's value from a file when its key starts with
// "/" (drawtext=/text=notes.txt), as -/opt does for options: refused like it.
func TestFilterOptionFromFileRefused(t *testing.T) {
	spec := Spec{Inputs: map[string]bool{"video": true}, Outputs: map[string]bool{"out.mp4": true}}
	for _, c := range []string{`-af '0=/=0' outputs/out.mp4`, `-i inputs/video -vf "drawtext=/text=inputs/video" outputs/out.mp4`} {
		_, err := Prepare(c, spec)
		if err == nil || !strings.Contains(err.Error(), "reads the option's value from a file") || !strings.Contains(err.Error(), "instead") {
			t.Errorf("Prepare(%q): %v, want the file-option refusal", c, err)
		}
	}
}

// A tee slave's options end at the first "]" after a pair, as libavformat's tee
// reads them; the rest is the slave's file name, checked as a path.
func TestTeeOptionsEndWhereFFmpegEndsThem(t *testing.T) {
	spec := Spec{Inputs: map[string]bool{"video": true}, Outputs: map[string]bool{"out.mp4": true}}
	for c, ok := range map[string]bool{
		"-i inputs/video -f tee []/]0":                                                    false, // the file name is "/]0"
		"-i inputs/video -f tee [f=mp4]/x]outputs/out.mp4":                                false, // "/x]outputs/out.mp4"
		"-i inputs/video -f tee [f=mp4]outputs/out.mp4":                                   true,
		`-i inputs/video -f tee "[f=mp4:onfail=ignore]outputs/out.mp4|[f=null]/dev/null"`: true,
		`-i inputs/video -f tee "[f=mp4:movflags='a\]b']outputs/out.mp4"`:                 true, // a quoted "]" stays in the value
	} {
		_, err := Prepare(c, spec)
		if (err == nil) != ok {
			t.Errorf("Prepare(%q): %v, want ok=%v", c, err, ok)
		}
	}
}

// TestThreadOptionsCapped: thread counts above MaxThreads are refused, wherever
// they are written, with the limit in the message; up to it they run.
func TestThreadOptionsCapped(t *testing.T) {
	for _, ok := range []string{
		"-threads 0 -i inputs/video outputs/out.mp4",
		"-i inputs/video -threads auto -filter_threads 64 -filter_complex_threads 8 outputs/out.mp4",
		"-i inputs/video -x264-params threads=16 outputs/out.mp4",
		"-i inputs/video -vf scale=320:240:threads=4 outputs/out.mp4",
	} {
		if _, err := Prepare(ok, newSpec); err != nil {
			t.Errorf("Prepare(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{
		"-threads 65 -i inputs/video outputs/out.mp4",
		"-i inputs/video -filter_complex_threads 5000 -filter_complex nullsink outputs/out.mp4",
		"-i inputs/video -filter_threads 100000 outputs/out.mp4",
		"-i inputs/video -threads:v 1e4 outputs/out.mp4",
		"-i inputs/video -x264-params threads=512 outputs/out.mp4",
		"-i inputs/video -vf scale=320:240:threads=999 outputs/out.mp4",
	} {
		_, err := Prepare(bad, newSpec)
		if err == nil || !strings.Contains(err.Error(), "thread count") || !strings.Contains(err.Error(), "64") {
			t.Errorf("Prepare(%q) = %v, want a refusal naming the limit of 64 threads", bad, err)
		}
	}
}
