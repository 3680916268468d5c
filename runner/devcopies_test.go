package runner

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
	"golang.org/x/sys/unix"
)

// devCopiesIn makes a fresh $TMPDIR, where the sandbox makes its device
// copies, and returns a func listing the copies' directories there.
func devCopiesIn(t *testing.T) func() []string {
	t.Helper()
	tmp := t.TempDir()
	var s unix.Statfs_t
	if err := unix.Statfs(tmp, &s); err != nil || s.Flags&(unix.ST_NODEV|unix.ST_RDONLY) != 0 {
		t.Skipf("%s holds no device nodes (%v): the copies would go to /dev", tmp, err)
	}
	t.Setenv("TMPDIR", tmp)
	return func() []string {
		m, err := filepath.Glob(filepath.Join(tmp, "mediajobs-dev-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestChunkPlanReleasesSandboxDeviceCopies: a chunked plan's probes run
// sandboxed through chunked's Commander under the phase's context, which
// lasts the whole phase (a stitch's ~70 probes and decodes); each command's
// device copies are removed once it has exited, not when the context ends.
// The output probes too.
func TestChunkPlanReleasesSandboxDeviceCopies(t *testing.T) {
	testenv.Binary(t, "bwrap")
	dirs := devCopiesIn(t)
	srv, _ := newServer(t, map[string][]byte{"src.mp4": chunkSource(t)})
	m := mj.Manifest{JobID: "job-1", Attempt: 1, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 120,
		InputFiles: map[string]string{"video": srv.URL + "/in/src.mp4"}, AllowLoopback: true,
		OutputNames:    []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkSplitPattern},
		FFmpegCommands: []string{"-i {{video}} -c:v libx264 -preset veryfast -crf 30 -c:a aac {{out.mp4}}"},
		Chunk:          &mj.ChunkTask{Phase: mj.PhasePlan, Input: "video", Output: "out.mp4", ChunkSeconds: 1, MaxChunks: 64, SceneCuts: true}}
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: testenv.Binary(t, "ffmpeg"), FFprobe: testenv.Binary(t, "ffprobe"), Sandbox: &sandbox.Bwrap{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if st := r.Fetch(ctx, &m); st.Failed {
		t.Fatalf("fetch: %s", st.Error)
	}
	ph, err := r.chunkPhase(ctx, &m)
	if err != nil {
		t.Fatal(err)
	}
	if len(ph.argvs) < 2 {
		t.Fatalf("planned %d chunks", len(ph.argvs))
	}
	if d := dirs(); len(d) != 0 {
		t.Fatalf("the plan's probes are over, the phase's context still live: %d directories of device copies left: %v", len(d), d)
	}
	for range 3 {
		if _, err := r.runFFprobe(ctx, "inputs/video"); err != nil {
			t.Fatal(err)
		}
	}
	if d := dirs(); len(d) != 0 {
		t.Fatalf("after the output probes: %d directories of device copies left: %v", len(d), d)
	}
}

// TestGPUNodeCopyFailureIsAWorkerFault: a GPU sandbox whose device nodes
// cannot be copied (no CAP_MKNOD, a full or read-only $TMPDIR: the node's
// fault) is a worker fault, so the job is retried elsewhere, not failed: with
// a sandbox per command and with one for the job's commands.
func TestGPUNodeCopyFailureIsAWorkerFault(t *testing.T) {
	testenv.Binary(t, "bwrap")
	if os.Geteuid() != 0 {
		t.Skip("making device nodes needs root")
	}
	devCopiesIn(t)
	src := t.TempDir()
	if err := syscall.Mknod(filepath.Join(src, "nvidia0"), syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sandbox.FakeGPUNodes(filepath.Join(src, "nvidia*"), syscall.EPERM))
	for _, cmds := range [][]string{
		{"-f lavfi -i sine=d=0.1 {{o.wav}}"},
		{"-f lavfi -i sine=d=0.1 {{a.wav}}", "-f lavfi -i sine=d=0.1 {{o.wav}}"},
	} {
		m := mj.Manifest{JobID: "job-1", Attempt: 1, TimeoutSeconds: 60, OutputNames: []string{"a.wav", "o.wav"}, FFmpegCommands: cmds, AllowGPU: true}
		var log strings.Builder
		r := &Runner{WorkDir: t.TempDir(), Log: &log, FFmpeg: testenv.Binary(t, "ffmpeg"), Sandbox: &sandbox.Bwrap{GPU: true}, OneSandbox: true}
		st := r.Fetch(context.Background(), &m)
		if st.Failed {
			t.Fatalf("fetch: %s", st.Error)
		}
		r.Exec(context.Background(), &m, st)
		if st.Failed || !strings.Contains(st.WorkerFault, "no GPU device nodes for the sandbox") || !strings.Contains(st.WorkerFault, "operation not permitted") {
			t.Fatalf("%d commands: failed %v (%s), worker fault %q; want a worker fault\n%s", len(cmds), st.Failed, st.Error, st.WorkerFault, log.String())
		}
	}
}
