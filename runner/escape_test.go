package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// escapeEnv is what an escape attempt could reach on the host: a canary file at
// an absolute path (text, and a WAV whose samples are that text, so that a copy
// of its audio is a copy of the secret), a canary in a host process's environment, an
// empty directory outside the job and a loopback listener that counts connections.
type escapeEnv struct {
	secret  string
	canary  string // text file
	wav     string // WAV file whose samples are the secret
	outside string // must stay empty
	envPid  int    // a host process whose environment holds the secret
	ln      net.Listener
	hits    atomic.Int32
}

func newEscapeEnv(t *testing.T) *escapeEnv {
	t.Helper()
	ff := testenv.Binary(t, "ffmpeg")
	dir := t.TempDir()
	e := &escapeEnv{secret: fmt.Sprintf("MJCANARY-%d-host-secret", time.Now().UnixNano()), outside: t.TempDir()}
	e.canary = filepath.Join(dir, "canary.txt")
	os.WriteFile(e.canary, bytes.Repeat([]byte(e.secret+"\n"), 100), 0o644)
	e.wav = filepath.Join(dir, "canary.wav")
	if out, err := exec.Command(ff, "-v", "error", "-f", "u8", "-ar", "8000", "-ac", "1", "-i", e.canary, "-c:a", "pcm_u8", e.wav).CombinedOutput(); err != nil {
		t.Fatalf("make canary wav: %v %s", err, out)
	}
	// A host process with the secret in its environment, as Nomad's agent has
	// its tokens.
	holder := exec.Command("sleep", "120")
	holder.Env = []string{"MEDIAJOBS_ESCAPE_CANARY=" + e.secret}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	e.envPid = holder.Process.Pid
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.hits.Add(1)
			c.Close()
		}
	}()
	return e
}

// leaked says how the attempt got out, or "".
func (e *escapeEnv) leaked(t *testing.T, work string, up *uploads) string {
	t.Helper()
	var why []string
	up.mu.Lock()
	for name, b := range up.files {
		if bytes.Contains(b, []byte(e.secret)) {
			why = append(why, "the secret is in the uploaded "+name)
		}
	}
	up.mu.Unlock()
	filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(e.secret)) {
				why = append(why, "the secret is in the job's file "+strings.TrimPrefix(p, work))
			}
		}
		return nil
	})
	if ents, _ := os.ReadDir(e.outside); len(ents) > 0 {
		why = append(why, fmt.Sprintf("%d file(s) written outside the job, e.g. %s", len(ents), ents[0].Name()))
	}
	if n := e.hits.Load(); n > 0 {
		why = append(why, fmt.Sprintf("%d connection(s) to a loopback listener", n))
	}
	return strings.Join(why, "; ")
}

// bypassChecker switches the command checker off for t: commands are split like
// a shell splits them and nothing is refused.
func bypassChecker(t *testing.T) {
	orig := prepare
	prepare = func(c string, _ command.Spec) ([]string, error) { return command.Split(c) }
	t.Cleanup(func() { prepare = orig })
}

// bypassAttack is an attack of TestSandboxHoldsWithTheCheckerBypassed; warm
// runners run the same (warm_test.go).
type bypassAttack struct {
	name    string
	inputs  func(e *escapeEnv) map[string]string // name -> content
	command func(e *escapeEnv) string
	outputs []string
}

func bypassAttacks() []bypassAttack {
	playlist := func(path string) string {
		return "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n" + path + "\n#EXT-X-ENDLIST\n"
	}
	url := func(e *escapeEnv) string { return "http://" + e.ln.Addr().String() + "/x" }
	return []bypassAttack{{
		name:   "HLS playlist naming a host file, extension checks off",
		inputs: func(e *escapeEnv) map[string]string { return map[string]string{"pl.m3u8": playlist(e.wav)} },
		command: func(e *escapeEnv) string {
			return "-allowed_extensions ALL -allowed_segment_extensions ALL -extension_picky 0 -i inputs/pl.m3u8 -c copy -f u8 outputs/out.raw"
		},
		outputs: []string{"out.raw"},
	}, {
		name:    "absolute input path",
		command: func(e *escapeEnv) string { return "-i " + e.wav + " -c copy -f u8 outputs/out.raw" },
		outputs: []string{"out.raw"},
	}, {
		name: "a host process's environment through /proc",
		command: func(e *escapeEnv) string {
			return fmt.Sprintf("-f u8 -ar 8000 -ac 1 -i /proc/%d/environ -c copy -f u8 outputs/out.raw", e.envPid)
		},
		outputs: []string{"out.raw"},
	}, {
		name: "concat list naming a host file with -safe 0",
		inputs: func(e *escapeEnv) map[string]string {
			return map[string]string{"list.txt": "ffconcat version 1.0\nfile '" + e.wav + "'\n"}
		},
		command: func(e *escapeEnv) string { return "-f concat -safe 0 -i inputs/list.txt -c copy -f u8 outputs/out.raw" },
		outputs: []string{"out.raw"},
	}, {
		name:    "movie source reading a host file",
		command: func(e *escapeEnv) string { return "-f lavfi -i amovie=" + e.wav + " -c:a pcm_u8 -f u8 outputs/out.raw" },
		outputs: []string{"out.raw"},
	}, {
		name: "-fpre options writing a segment list outside the job",
		inputs: func(e *escapeEnv) map[string]string {
			return map[string]string{"p.txt": "segment_list=" + filepath.Join(e.outside, "list.csv") + "\n"}
		},
		command: func(e *escapeEnv) string {
			return "-f lavfi -i testsrc=d=1:size=64x64 -fpre inputs/p.txt -f segment outputs/seg%d.ts"
		},
		outputs: []string{"seg%d.ts"},
	}, {
		name: "-fpre options posting a segment list to a local service",
		inputs: func(e *escapeEnv) map[string]string {
			return map[string]string{"p.txt": "segment_list=" + url(e) + "\n"}
		},
		command: func(e *escapeEnv) string {
			return "-f lavfi -i testsrc=d=1:size=64x64 -fpre inputs/p.txt -f segment outputs/seg%d.ts"
		},
		outputs: []string{"seg%d.ts"},
	}, {
		name:   "HLS key info file naming a URL",
		inputs: func(e *escapeEnv) map[string]string { return map[string]string{"keyinfo": "k.key\n" + url(e) + "\n"} },
		command: func(e *escapeEnv) string {
			return "-f lavfi -i testsrc=d=1:size=64x64 -hls_key_info_file inputs/keyinfo -f hls outputs/pl.m3u8"
		},
		outputs: []string{"pl.m3u8"},
	}, {
		name: "HLS segments written outside the job",
		command: func(e *escapeEnv) string {
			return "-f lavfi -i testsrc=d=1:size=64x64 -f hls -hls_segment_filename " + e.outside + "/s%d.ts outputs/pl.m3u8"
		},
		outputs: []string{"pl.m3u8"},
	}, {
		name:    "absolute output path",
		command: func(e *escapeEnv) string { return "-f lavfi -i testsrc=d=0.2:size=64x64 " + e.outside + "/x.mp4" },
		outputs: []string{"x.mp4"},
	}, {
		name:    "URL input",
		command: func(e *escapeEnv) string { return "-i " + url(e) + " -f null -" },
		outputs: []string{"x"},
	}}
}

// TestSandboxHoldsWithTheCheckerBypassed runs hostile commands through the real
// runner, ffmpeg and bubblewrap with the command checker switched off, and
// asserts on effects: no host file, environment variable or loopback service is
// reached, and nothing is written outside the job. Each attack is first run
// without the sandbox, where it must get out: proof that it is a real attack.
func TestSandboxHoldsWithTheCheckerBypassed(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	bypassChecker(t)

	for _, a := range bypassAttacks() {
		t.Run(a.name, func(t *testing.T) {
			for _, sandboxed := range []bool{false, true} {
				e := newEscapeEnv(t)
				inputs := map[string][]byte{}
				if a.inputs != nil {
					for n, c := range a.inputs(e) {
						inputs[n] = []byte(c)
					}
				}
				srv, up := newServer(t, inputs)
				m := mj.Manifest{JobID: "job-1", Attempt: 1, InputFiles: map[string]string{}, OutputNames: a.outputs,
					FFmpegCommands: []string{a.command(e)}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 60}
				for n := range inputs {
					m.InputFiles[n] = srv.URL + "/in/" + n
				}
				work := t.TempDir()
				r := &Runner{WorkDir: work, Log: io.Discard}
				if sandboxed {
					r.Sandbox = &sandbox.Bwrap{}
				}
				res, err := r.Run(context.Background(), &m)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				how := e.leaked(t, work, up)
				if !sandboxed {
					if how == "" {
						t.Fatalf("control: without the sandbox the attack did not get out (result %+v); it proves nothing", res)
					}
					continue
				}
				if how != "" {
					t.Fatalf("escaped the sandbox: %s (result %+v)", how, res)
				}
			}
		})
	}
}

// TestSandboxZMQListensOnNothing: the zmq filter binds a TCP port; in the
// sandbox's empty network namespace nothing on the host can connect to it, while
// without the sandbox the same command accepts a connection.
func TestSandboxZMQListensOnNothing(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	bypassChecker(t)
	for _, sandboxed := range []bool{false, true} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // a free port for zmq
		srv, _ := newServer(t, nil)
		m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"x"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60,
			FFmpegCommands: []string{`-re -f lavfi -i testsrc=d=6:size=64x64:rate=5 -vf 'zmq=bind_address=tcp\\\://` + strings.ReplaceAll(addr, ":", `\\\:`) + `' -f null -`}}
		r := &Runner{WorkDir: t.TempDir(), Log: io.Discard}
		if sandboxed {
			r.Sandbox = &sandbox.Bwrap{}
		}
		done := make(chan struct{})
		go func() { defer close(done); r.Run(context.Background(), &m) }()
		connected := false
	poll:
		for {
			select {
			case <-done:
				break poll
			case <-time.After(100 * time.Millisecond):
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.Close()
					connected = true
				}
			}
		}
		if !sandboxed && !connected {
			t.Fatal("control: without the sandbox, the zmq filter's port never accepted a connection; the check proves nothing")
		}
		if sandboxed && connected {
			t.Fatal("the zmq filter inside the sandbox accepted a connection from the host")
		}
	}
}

// TestRunnerFollowsNoLinkOutOfTheJob: an ffmpeg that runs code (a bug exploited
// by a crafted file) can replace outputs/ with a link to a host directory; the
// runner, often root, must not upload what the link points at.
func TestRunnerFollowsNoLinkOutOfTheJob(t *testing.T) {
	e := newEscapeEnv(t)
	os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte(e.secret), 0o600)
	fake := filepath.Join(t.TempDir(), "ffmpeg")
	os.WriteFile(fake, []byte("#!/bin/sh\nrm -rf outputs && ln -s "+e.outside+" outputs\n"), 0o755)
	srv, up := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"secret.txt"}, FFmpegCommands: []string{"-f lavfi -i sine {{secret.txt}}"},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	work := t.TempDir()
	res, err := (&Runner{WorkDir: work, Log: io.Discard, FFmpeg: fake}).Run(context.Background(), &m)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(e.outside, "secret.txt")) // leaked() counts files left outside
	if how := e.leaked(t, work, up); how != "" || res.Succeeded {
		t.Fatalf("followed the link: %s (result %+v)", how, res)
	}
}

// openedAttack is an attack of TestSandboxHoldsForTheOpenedForms; warm runners
// run the same (warm_test.go).
type openedAttack struct {
	name    string
	inputs  func(e *escapeEnv, host string) map[string]string
	command string // HOST/ stands for the host directory job makes
	// plant runs after the inputs are fetched, before the commands: what an
	// earlier command of a compromised ffmpeg could have left in the job.
	plant func(t *testing.T, e *escapeEnv, work string)
	// plantSh is plant as a shell command, run in the job's directory by an
	// earlier command of a compromised ffmpeg (a warm runner runs the job whole).
	plantSh func(e *escapeEnv) string
}

// climbOut leads from any job directory to the root.
var climbOut = strings.Repeat("../", 24)

func openedAttacks() []openedAttack {
	list := func(entries ...string) string {
		s := "ffconcat version 1.0\n"
		for _, e := range entries {
			s += "file '" + e + "'\n"
		}
		return s
	}
	up := climbOut
	url := func(e *escapeEnv) string { return "http://" + e.ln.Addr().String() + "/x" }
	const concat = "-f concat -safe 0 -i inputs/list.txt -c copy -f u8 outputs/out.raw"
	// The HLS demuxer's extension checks off (-allowed_extensions ALL...): the
	// checker allows these now, so the sandbox alone must hold.
	const hls = "-allowed_extensions ALL -allowed_segment_extensions ALL -extension_picky 0 -i inputs/master.m3u8 -c copy -f u8 outputs/out.raw"
	// image2 reading each matched file whole, as one raw packet copied out.
	const image = "-f image2 -c:v rawvideo -video_size 4x4 -pixel_format gray "
	return []openedAttack{{
		name: "concat list naming the host's root through /proc/self/root",
		inputs: func(e *escapeEnv, _ string) map[string]string {
			return map[string]string{"list.txt": list("/proc/self/root" + e.wav)}
		},
		command: concat,
	}, {
		name: "concat list climbing out with ../",
		inputs: func(e *escapeEnv, _ string) map[string]string {
			return map[string]string{"list.txt": list(up + e.wav[1:])}
		},
		command: concat,
	}, {
		name:   "concat list naming a URL",
		inputs: func(e *escapeEnv, _ string) map[string]string { return map[string]string{"list.txt": list(url(e))} },
		// The checker refuses a whitelist naming network protocols; bypassed, it
		// lets ffmpeg try.
		command: "-protocol_whitelist file,crypto,data,http,tcp " + concat,
	}, {
		name:   "concat list naming a link planted in the job",
		inputs: func(e *escapeEnv, _ string) map[string]string { return map[string]string{"list.txt": list("link.wav")} },
		plant: func(t *testing.T, e *escapeEnv, work string) {
			if err := os.Symlink(e.wav, filepath.Join(work, "inputs", "link.wav")); err != nil {
				t.Fatal(err)
			}
		},
		plantSh: func(e *escapeEnv) string { return "ln -s " + e.wav + " inputs/link.wav" },
		command: concat,
	}, {
		name: "HLS master playlist whose variant is a host playlist",
		inputs: func(e *escapeEnv, host string) map[string]string {
			return map[string]string{"master.m3u8": "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=100000\n" + filepath.Join(host, "variant.m3u8") + "\n"}
		},
		command: hls,
	}, {
		name: "HLS master playlist whose variant climbs out with ../",
		inputs: func(e *escapeEnv, host string) map[string]string {
			return map[string]string{"master.m3u8": "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=100000\n" + up + filepath.Join(host, "variant.m3u8")[1:] + "\n"}
		},
		command: hls,
	}, {
		name: "HLS master playlist whose variant is a URL",
		inputs: func(e *escapeEnv, host string) map[string]string {
			return map[string]string{"master.m3u8": "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=100000\n" + url(e) + "/v.m3u8\n"}
		},
		command: "-protocol_whitelist file,crypto,data,http,tcp " + hls,
	}, {
		name:    "image glob matching host files",
		command: image + "-pattern_type glob -i '" + "HOST/*.txt' -c copy -f rawvideo outputs/out.raw",
	}, {
		name:    "image sequence climbing out of inputs/",
		command: image + "-i 'inputs/" + up + "HOST/s%d.txt' -c copy -f rawvideo outputs/out.raw",
	}}
}

// job makes the host files a pattern or a playlist could reach (the secret as
// text, and a media playlist naming the canary WAV) and returns the job's
// inputs and its command.
func (a openedAttack) job(t *testing.T, e *escapeEnv) (map[string][]byte, string) {
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "s1.txt"), []byte(e.secret), 0o644)
	os.WriteFile(filepath.Join(host, "variant.m3u8"), []byte("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n"+e.wav+"\n#EXT-X-ENDLIST\n"), 0o644)
	inputs := map[string][]byte{}
	if a.inputs != nil {
		for n, c := range a.inputs(e, host) {
			inputs[n] = []byte(c)
		}
	}
	cmd := strings.ReplaceAll(a.command, "HOST/", strings.TrimPrefix(host, "/")+"/")
	if !strings.Contains(a.command, "inputs/"+climbOut+"HOST") {
		cmd = strings.ReplaceAll(a.command, "HOST/", host+"/")
	}
	return inputs, cmd
}

// TestSandboxHoldsForTheOpenedForms: the constructs the checker lets through since
// the sandbox is the guarantee (concat lists with -safe 0, HLS playlists, image
// patterns; docs/threat-model.md), made hostile and run with the checker
// switched off. Each reads a host canary, reaches a loopback listener or writes
// outside without the sandbox, and gets nothing out with it.
func TestSandboxHoldsForTheOpenedForms(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	bypassChecker(t)

	for _, a := range openedAttacks() {
		t.Run(a.name, func(t *testing.T) {
			for _, sandboxed := range []bool{false, true} {
				e := newEscapeEnv(t)
				inputs, cmd := a.job(t, e)
				srv, ups := newServer(t, inputs)
				m := mj.Manifest{JobID: "job-1", Attempt: 1, InputFiles: map[string]string{}, OutputNames: []string{"out.raw"},
					FFmpegCommands: []string{cmd}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 60}
				for n := range inputs {
					m.InputFiles[n] = srv.URL + "/in/" + n
				}
				work := t.TempDir()
				r := &Runner{WorkDir: work, Log: io.Discard}
				if sandboxed {
					r.Sandbox = &sandbox.Bwrap{}
				}
				st := r.Fetch(context.Background(), &m)
				if a.plant != nil {
					a.plant(t, e, work)
				}
				r.Exec(context.Background(), &m, st)
				res, err := r.Upload(context.Background(), &m, st)
				if err != nil {
					t.Fatalf("Upload: %v", err)
				}
				how := e.leaked(t, work, ups)
				if !sandboxed {
					if how == "" {
						t.Fatalf("control: without the sandbox the attack did not get out (result %+v); it proves nothing", res)
					}
					continue
				}
				if how != "" {
					t.Fatalf("escaped the sandbox: %s (result %+v)", how, res)
				}
			}
		})
	}
}

// TestOpenedFormsRunInTheSandbox: the idioms the checker now allows pass it and
// run in the sandbox: concat lists with -safe 0 (a bare name resolves beside the
// list, an absolute /job path inside the sandbox), the concat protocol, a
// two-pass encode whose first pass writes to NUL, an image sequence.
func TestOpenedFormsRunInTheSandbox(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	dir := t.TempDir()
	mk := func(name string, args ...string) []byte {
		p := filepath.Join(dir, name)
		if out, err := exec.Command(ff, append(append([]string{"-v", "error"}, args...), p)...).CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v %s", name, err, out)
		}
		b, _ := os.ReadFile(p)
		return b
	}
	inputs := map[string][]byte{
		"a.ts":       mk("a.ts", "-f", "lavfi", "-i", "testsrc=d=1:size=64x64:rate=10", "-c:v", "mpeg2video"),
		"b.ts":       mk("b.ts", "-f", "lavfi", "-i", "testsrc=d=1:size=64x64:rate=10", "-c:v", "mpeg2video"),
		"img001.png": mk("img001.png", "-f", "lavfi", "-i", "color=red:size=32x32", "-frames:v", "1"),
		"img002.png": mk("img002.png", "-f", "lavfi", "-i", "color=blue:size=32x32", "-frames:v", "1"),
		"list.txt":   []byte("ffconcat version 1.0\nfile a.ts\nfile '/job/inputs/b.ts'\n"),
	}
	for _, c := range []struct {
		name string
		cmds []string
	}{
		{"concat demuxer with -safe 0", []string{"-f concat -safe 0 -i inputs/list.txt -c copy outputs/out.ts"}},
		{"concat protocol", []string{"-i concat:inputs/a.ts|inputs/b.ts -c copy outputs/out.ts"}},
		{"two-pass, first pass to NUL", []string{
			"-i inputs/a.ts -c:v mpeg4 -b:v 100k -pass 1 -passlogfile pass -f null NUL",
			"-i inputs/a.ts -c:v mpeg4 -b:v 100k -pass 2 -passlogfile pass -f mpegts outputs/out.ts"}},
		{"two-pass, first pass to /dev/null", []string{
			"-i inputs/a.ts -c:v mpeg4 -b:v 100k -pass 1 -passlogfile pass -f mpegts /dev/null",
			"-i inputs/a.ts -c:v mpeg4 -b:v 100k -pass 2 -passlogfile pass -f mpegts outputs/out.ts"}},
		{"image sequence", []string{"-framerate 2 -i inputs/img%03d.png -c:v mpeg2video -f mpegts outputs/out.ts"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cmd := range c.cmds {
				spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{"out.ts": true}}
				for n := range inputs {
					spec.Inputs[n] = true
				}
				if _, err := command.Prepare(cmd, spec); err != nil {
					t.Fatalf("the gateway's checker refuses %q: %v", cmd, err)
				}
			}
			srv, ups := newServer(t, inputs)
			m := mj.Manifest{JobID: "job-1", Attempt: 1, InputFiles: map[string]string{}, OutputNames: []string{"out.ts"},
				FFmpegCommands: c.cmds, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 60}
			for n := range inputs {
				m.InputFiles[n] = srv.URL + "/in/" + n
			}
			res, err := (&Runner{WorkDir: t.TempDir(), Log: io.Discard, Sandbox: &sandbox.Bwrap{}}).Run(context.Background(), &m)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Succeeded {
				t.Fatalf("failed: %s", res.ErrorMessage)
			}
			ups.mu.Lock()
			defer ups.mu.Unlock()
			var got []byte
			for name, b := range ups.files {
				if strings.HasSuffix(name, "out.ts") {
					got = b
				}
			}
			if len(got) < 1000 {
				t.Fatalf("out.ts not uploaded or too small (%d bytes); uploads: %d", len(got), len(ups.files))
			}
		})
	}
}
