package command

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  bool
	}{
		{in: `-i a.mp4 b.mp4`, want: []string{"-i", "a.mp4", "b.mp4"}},
		{in: "  -i\ta.mp4\n b ", want: []string{"-i", "a.mp4", "b"}},
		{in: `-vf 'scale=1280:-2, fps=30'`, want: []string{"-vf", "scale=1280:-2, fps=30"}},
		{in: `-metadata "title=Say \"hi\" \$5"`, want: []string{"-metadata", `title=Say "hi" $5`}},
		{in: `-metadata "a\nb"`, want: []string{"-metadata", `a\nb`}},
		{in: `a\ b c`, want: []string{"a b", "c"}},
		{in: `'a'"b"c`, want: []string{"abc"}},
		{in: `''`, want: []string{""}},
		{in: `$HOME;rm -rf *|x`, want: []string{"$HOME;rm", "-rf", "*|x"}},
		{in: `'unterminated`, err: true},
		{in: `"unterminated`, err: true},
		{in: `trailing\`, err: true},
		{in: ``, want: nil},
	}
	for _, c := range cases {
		got, err := Split(c.in)
		if (err != nil) != c.err {
			t.Errorf("Split(%q) err=%v, want err=%v", c.in, err, c.err)
			continue
		}
		if !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPrepare(t *testing.T) {
	spec := Spec{
		Inputs:  map[string]bool{"video": true, "logo.png": true},
		Outputs: map[string]bool{"out.mp4": true, "seg_%03d.ts": true},
	}
	cases := []struct {
		in      string
		want    string // argv joined by "|"
		errPart string // substring of the error, "" when no error
		gpu     bool
	}{
		{in: "-i inputs/video -c:v libx264 outputs/out.mp4", want: "-i|inputs/video|-c:v|libx264|outputs/out.mp4"},
		{in: "ffmpeg -i {{video}} {{out.mp4}}", want: "-i|inputs/video|outputs/out.mp4"},
		{in: `-i <<video>> -i "<< logo.png >>" <<out.mp4>>`, want: "-i|inputs/video|-i|inputs/logo.png|outputs/out.mp4"},
		{in: "-i inputs/video -vf \"movie=inputs/logo.png [l]; [in][l] overlay\" mid.mp4", want: "-i|inputs/video|-vf|movie=inputs/logo.png [l]; [in][l] overlay|mid.mp4"},
		{in: "-i mid.mp4 -f segment outputs/seg_%03d.ts", want: "-i|mid.mp4|-f|segment|outputs/seg_%03d.ts"},
		{in: "-i inputs/video -vf fps=30000/1001 tmp/x.mp4", want: "-i|inputs/video|-vf|fps=30000/1001|tmp/x.mp4"},
		{in: "-i {{nope}} outputs/out.mp4", errPart: "{{nope}} does not name"},
		{in: "-i inputs/nope outputs/out.mp4", errPart: "inputs/nope is not a key"},
		{in: "-i inputs/video outputs/other.mp4", errPart: "outputs/other.mp4 is not an entry"},
		{in: "-i /etc/passwd outputs/out.mp4", errPart: "absolute paths"},
		{in: "-i inputs/video -vf subtitles=/etc/x.srt outputs/out.mp4", errPart: "absolute paths"},
		{in: "-i ~/x outputs/out.mp4", errPart: "absolute paths"},
		{in: "-i ../x outputs/out.mp4", errPart: `".."`},
		{in: "-i inputs/video -vf movie=a/../../x outputs/out.mp4", errPart: `".."`},
		{in: "-i http://example.com/a.mp4 outputs/out.mp4", errPart: "protocol prefixes"},
		{in: "-i concat:a.ts|b.ts outputs/out.mp4", want: "-i|concat:a.ts|b.ts|outputs/out.mp4"},
		{in: "-i concat:inputs/video|/etc/passwd outputs/out.mp4", errPart: "absolute paths"},
		{in: "-i concat:inputs/video|http://x/y outputs/out.mp4", errPart: "protocol prefixes"},
		{in: "-i subfile:,start,0,end,0,:x outputs/out.mp4", errPart: "protocol prefixes"},
		{in: "-i FILE:x outputs/out.mp4", errPart: "protocol prefixes"},
		{in: `-i inputs/video -vf 'movie=data\\\:x' outputs/out.mp4`, errPart: "protocol prefixes"},
		{in: "-i inputs/video -c:v h264_nvenc outputs/out.mp4", errPart: "GPU"},
		{in: "-hwaccel cuda -i inputs/video outputs/out.mp4", errPart: "GPU"},
		{in: "-i inputs/video -vf scale_npp=1280:720 outputs/out.mp4", errPart: "GPU"},
		{in: "-i inputs/video -c:v h264_nvenc outputs/out.mp4", gpu: true, want: "-i|inputs/video|-c:v|h264_nvenc|outputs/out.mp4"},
		{in: "-i 'unbalanced outputs/out.mp4", errPart: "unbalanced"},
		{in: "-protocol_whitelist file,http,tcp -i inputs/video outputs/out.mp4", errPart: "not allowed"},
		{in: "-i inputs/video -protocol_blacklist:0 x outputs/out.mp4", want: "-i|inputs/video|-protocol_blacklist:0|x|outputs/out.mp4"},
		{in: "-i {{ video }} '<< out.mp4 >>'", want: "-i|inputs/video|outputs/out.mp4"},
		{in: "-i {{ nosuch }} outputs/out.mp4", errPart: "{{nosuch}} does not name"},
		{in: "-i {{my video}} outputs/out.mp4", errPart: "a placeholder is"},
		{in: "-i inputs/video video}} outputs/out.mp4", errPart: "a placeholder is"},
		// ffmpeg's filter parser unescapes twice: what the escapes hide is checked too.
		{in: `-i inputs/video -vf 'drawtext=textfile=\/etc/passwd' outputs/out.mp4`, errPart: "absolute paths"},
		{in: `-i inputs/video -vf 'drawtext=textfile=\\/etc/passwd' outputs/out.mp4`, errPart: "absolute paths"},
		{in: `-i inputs/video -vf 'movie=a/\.\./\.\./x' outputs/out.mp4`, errPart: `".."`},
		{in: `-i inputs/video -vf 'movie=filename=http\\:\/\/169.254.169.254/' outputs/out.mp4`, errPart: "protocol prefixes"},
		{in: `-i inputs/video -vf 'movie=filename=h	tp\\\:\/\/127.0.0.1/' outputs/out.mp4`, errPart: "protocol prefixes"},
		{in: "-i inputs/video -vf 'movie= /etc/passwd' outputs/out.mp4", errPart: "absolute paths"},
		{in: "-i inputs/video -map 0 -c copy -f tee [f=u8]/etc/cron.d/x", errPart: "absolute paths"},
		{in: "-f concat -safe 0 -i inputs/video outputs/out.mp4", want: "-f|concat|-safe|0|-i|inputs/video|outputs/out.mp4"},
		{in: `-dump_attachment:t "" -i inputs/video outputs/out.mp4`, want: "-dump_attachment:t||-i|inputs/video|outputs/out.mp4"},
		{in: "-filter_complex_script inputs/video -i inputs/video outputs/out.mp4", errPart: "not allowed"},
		{in: "-i inputs/video -/vf inputs/video outputs/out.mp4", errPart: "not allowed"},
		{in: "-i inputs/video -af ladspa=file=./inputs/video outputs/out.mp4", errPart: "loads a plugin"},
		{in: "-i inputs/video -vf frei0r=filter_name=x outputs/out.mp4", errPart: "loads a plugin"},
		{in: "-i inputs/video -vf 'scale=640:-2,frei0r=distort0r' outputs/out.mp4", errPart: "loads a plugin"},
		{in: "-i inputs/video -vf sendcmd=f=inputs/video,drawtext=text=x outputs/out.mp4", want: "-i|inputs/video|-vf|sendcmd=f=inputs/video,drawtext=text=x|outputs/out.mp4"},
		{in: "-i inputs/video -vf sendcmd=f=/etc/passwd outputs/out.mp4", errPart: "absolute paths"},
		// Escapes and names that merely look alike stay usable.
		{in: `-i inputs/video -vf 'drawtext=text=Time\: 10' outputs/out.mp4`, want: `-i|inputs/video|-vf|drawtext=text=Time\: 10|outputs/out.mp4`},
		{in: "-i inputs/video -metadata title=frei0r outputs/out.mp4", want: "-i|inputs/video|-metadata|title=frei0r|outputs/out.mp4"},
		{in: `-i inputs/video -vf "sendcmd=c='0 drawtext reinit text=hi',drawtext=text=x" outputs/out.mp4`, want: "-i|inputs/video|-vf|sendcmd=c='0 drawtext reinit text=hi',drawtext=text=x|outputs/out.mp4"},
		{in: `-i inputs/video -vf "sendcmd@x=f=inputs/nope,drawtext=text=a" outputs/out.mp4`, errPart: "not a key of input_files"},
		{in: `-i inputs/video -vf "sendcmd =f=../x,drawtext=text=a" outputs/out.mp4`, errPart: `".."`},
		{in: `-i inputs/video -vf "scale=1:1, ladspa@l=file=x" outputs/out.mp4`, errPart: "loads a plugin"},
		// Text that only looks like a path, a protocol or a plugin stays usable.
		{in: `-i inputs/video -metadata "title=Part 1 / 2" outputs/out.mp4`, want: "-i|inputs/video|-metadata|title=Part 1 / 2|outputs/out.mp4"},
		{in: `-i inputs/video -vf "scale=-2:'ih /2'" outputs/out.mp4`, want: "-i|inputs/video|-vf|scale=-2:'ih /2'|outputs/out.mp4"},
		{in: `-i inputs/video -vf "drawtext=text='Data\: 5'" outputs/out.mp4`, want: `-i|inputs/video|-vf|drawtext=text='Data\: 5'|outputs/out.mp4`},
		{in: `-i inputs/video -metadata "comment=made with ladspa" outputs/out.mp4`, want: "-i|inputs/video|-metadata|comment=made with ladspa|outputs/out.mp4"},
		{in: `-i inputs/video -metadata "title=A >> B" outputs/out.mp4`, want: "-i|inputs/video|-metadata|title=A >> B|outputs/out.mp4"},
		{in: `-i inputs/video -vf "select='eq(n\,0)'" -map 0:v:0 outputs/out.mp4`, want: `-i|inputs/video|-vf|select='eq(n\,0)'|-map|0:v:0|outputs/out.mp4`},
		{in: "ffmpeg", errPart: "empty"},
		{in: "rm -rf outputs/out.mp4", errPart: "must start with an option"},
	}
	for _, c := range cases {
		s := spec
		s.AllowGPU = c.gpu
		got, err := Prepare(c.in, s)
		if c.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), c.errPart) {
				t.Errorf("Prepare(%q) err=%v, want error containing %q", c.in, err, c.errPart)
			}
			continue
		}
		if err != nil {
			t.Errorf("Prepare(%q) unexpected error: %v", c.in, err)
			continue
		}
		if j := strings.Join(got, "|"); j != c.want {
			t.Errorf("Prepare(%q) = %q, want %q", c.in, j, c.want)
		}
	}
}

func TestValidOutputName(t *testing.T) {
	for name, want := range map[string]bool{
		"out.mp4": true, "seg_%03d.ts": true, "frame_%d.png": true, "a%d_%d.png": false,
		"100%.mp4": false, ".hidden": false, "a/b.mp4": false, "": false, "ok-name_1.MOV": true,
	} {
		if got := ValidOutputName(name); got != want {
			t.Errorf("ValidOutputName(%q) = %v, want %v", name, got, want)
		}
	}
}

func FuzzPrepare(f *testing.F) {
	for _, s := range []string{"-i inputs/video outputs/out.mp4", `-vf 'a=b' "c\"d"`, "-i {{video}} <<out.mp4>>", `a\`, "-i /x ../y http://z", `-vf 'drawtext=textfile=\/etc/x'`, "-f tee [f=u8]outputs/out.mp4",
		// The forms the sandbox contains (issue 21).
		"-f concat -safe 0 -i inputs/video -c copy outputs/out.mp4", "-i concat:inputs/video|x.ts outputs/out.mp4",
		"-i inputs/video -pass 1 -f null /dev/null", "-i inputs/video -f null NUL", "-i inputs/video -af volumedetect -f null -",
		"-framerate 1 -i inputs/vid%d -pattern_type glob -i 'inputs/v*' outputs/out.mp4",
		"-i inputs/video -f hls -var_stream_map 'v:0 v:1' -master_pl_name out.mp4 -hls_segment_filename outputs/out.mp4 outputs/out.mp4",
		"-i inputs/video -vb 1M -vprofile high -ab 96k -hls_base_url https://x/ -metadata c=http://y outputs/out.mp4",
		`-i inputs/video -vf "drawtext=text='http\://x'" outputs/out.mp4`,
		"-f fifo -fifo_format tee -i inputs/video [f=mp4]outputs/out.mp4|/dev/null",
		`-f tee -i inputs/video "[f=fifo:fifo_format=tee]outputs/out.mp4\|x"`,
		"-mj_deferred 1 -i inputs/video -vf mj_deferred_filter outputs/out.mp4",
	} {
		f.Add(s)
	}
	spec := Spec{Inputs: map[string]bool{"video": true}, Outputs: map[string]bool{"out.mp4": true}}
	f.Fuzz(func(t *testing.T, s string) {
		argv, err := Prepare(s, spec)
		if err != nil {
			return
		}
		// Whatever passes must not reach outside the job directory, neither as
		// written nor as ffmpeg's filter parser unescapes it: but the null sink,
		// text options' values and filter graphs with text (drawtext, metadata),
		// which ffmpeg never opens.
		for i, w := range argv {
			if w == "/dev/null" || i > 0 && textOptions[strings.TrimPrefix(strings.SplitN(argv[i-1], ":", 2)[0], "-")] {
				continue
			}
			// Any case: the checker reads filter names as ffmpeg might be asked to
			// (a name ffmpeg does not know fails there).
			if lw := strings.ToLower(w); strings.Contains(lw, "drawtext") || strings.Contains(lw, "metadata") || strings.Contains(w, "/usr/share/fonts/") {
				continue
			}
			// A tee slave may be the null sink too ([f=null]/dev/null).
			w := strings.NewReplacer("]/dev/null", "]", "|/dev/null", "|").Replace(w)
			for _, v := range []string{w, strings.NewReplacer(`\`, "", "'", "").Replace(w)} {
				if strings.HasPrefix(v, "/") || strings.Contains(v, "://") || strings.Contains(v, "=/") || strings.Contains(v, "]/") {
					t.Fatalf("Prepare(%q) let %q through", s, w)
				}
				for _, p := range strings.FieldsFunc(v, isPathSep) {
					if p == ".." {
						t.Fatalf("Prepare(%q) let %q through", s, w)
					}
				}
			}
		}
	})
}
