package runner

import (
	"context"
	"encoding/json"
	"io"
	"runtime"
	"syscall"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// childCPU is the CPU time of this process's reaped children (and theirs).
func childCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A job reports the CPU time of its ffmpeg and ffprobe processes, sandboxed or
// not: as much in the sandbox as outside it, no more than this process's
// children used in the meantime, and no more than its wall time on every core.
func TestResultReportsUsage(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	var plain float64 // the CPU time of the job outside the sandbox
	for _, box := range []*sandbox.Bwrap{nil, {}} {
		srv, up := newServer(t, nil)
		m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.mp4"}, TimeoutSeconds: 120,
			FFmpegCommands: []string{"-f lavfi -i testsrc=d=4:size=640x480:rate=25 -c:v libx264 -preset medium outputs/o.mp4"},
			UploadURL:      srv.URL + "/up/%7Bpath%7D?sig=ok"}
		before := childCPU(t)
		res, err := (&Runner{WorkDir: t.TempDir(), Log: io.Discard, Sandbox: box}).Run(context.Background(), &m)
		used := childCPU(t) - before
		if err != nil || !res.Succeeded {
			t.Fatalf("sandbox %v: %v %+v", box != nil, err, res)
		}
		u := res.Usage
		if u == nil || u.CPUSeconds <= 0 || u.WallSeconds <= 0 {
			t.Fatalf("sandbox %v: usage %+v: an encode takes CPU time", box != nil, u)
		}
		if u.CPUSeconds > used.Seconds()+0.001 {
			t.Fatalf("sandbox %v: reported %.3f s of CPU, more than this process's children used (%.3f s)", box != nil, u.CPUSeconds, used.Seconds())
		}
		// In the sandbox as outside it: ffmpeg's time is not lost with an
		// unreaped process (bwrap's own setup takes some milliseconds).
		if box == nil {
			plain = u.CPUSeconds
		} else if u.CPUSeconds < plain/2 {
			t.Fatalf("sandboxed, the encode took %.3f s of CPU; %.3f s unsandboxed", u.CPUSeconds, plain)
		}
		if u.CPUSeconds > u.WallSeconds*float64(runtime.NumCPU())+0.01 {
			t.Fatalf("sandbox %v: %.3f s of CPU in %.3f s on %d cores", box != nil, u.CPUSeconds, u.WallSeconds, runtime.NumCPU())
		}
		if len(res.Outputs) != 1 || u.OutputBytes != res.Outputs[0].Size || u.InputBytes != 0 || u.GPUSeconds != 0 {
			t.Fatalf("sandbox %v: usage %+v, outputs %+v", box != nil, u, res.Outputs)
		}
		var sent mj.Result
		if err := json.Unmarshal(up.files["result.json"], &sent); err != nil || sent.Usage == nil || *sent.Usage != *u {
			t.Fatalf("sandbox %v: result.json usage %+v (%v), want %+v", box != nil, sent.Usage, err, u)
		}
	}
}
