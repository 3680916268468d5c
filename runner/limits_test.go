package runner

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// A job whose files outgrow the pool's disk is stopped and fails saying so,
// sandboxed or not (Nomad does not enforce ephemeral_disk).
func TestJobDirectoryCappedAtThePoolsDisk(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	for _, box := range []*sandbox.Bwrap{nil, {}} {
		srv, up := newServer(t, nil)
		// Raw video: about 23 MB a second, against an 8 MiB disk.
		m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"big.raw"}, DiskBytes: 8 << 20, TimeoutSeconds: 120,
			FFmpegCommands: []string{"-re -f lavfi -i testsrc=d=60:size=640x480:rate=25 -f rawvideo {{big.raw}}"},
			UploadURL:      srv.URL + "/up/%7Bpath%7D?sig=ok"}
		work := t.TempDir()
		res, err := (&Runner{WorkDir: work, Log: io.Discard, Sandbox: box}).Run(context.Background(), &m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Succeeded || !strings.Contains(res.ErrorMessage, "command 1 of 1") || !strings.Contains(res.ErrorMessage, "disk limit") {
			t.Fatalf("sandbox %v: result %+v", box != nil, res)
		}
		if _, ok := up.files["outputs/big.raw"]; ok {
			t.Fatal("an output over the disk limit was uploaded")
		}
		if fi, err := os.Stat(filepath.Join(work, "outputs", "big.raw")); err == nil && fi.Size() > 64<<20 {
			t.Fatalf("ffmpeg went on writing long after the limit: %d bytes", fi.Size())
		}
	}
}

// Inputs count against the pool's disk too: one that does not fit fails before
// it is written, whatever the worker has free.
func TestInputsCappedAtThePoolsDisk(t *testing.T) {
	srv, _ := newServer(t, map[string][]byte{"a": make([]byte, 3<<20), "b": make([]byte, 3<<20)})
	m := mj.Manifest{InputFiles: map[string]string{"a": srv.URL + "/in/a", "b": srv.URL + "/in/b"}, AllowLoopback: true, DiskBytes: 5 << 20,
		OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-i {{a}} -i {{b}} {{o.wav}}"}}
	st := (&Runner{WorkDir: t.TempDir()}).Fetch(context.Background(), &m)
	if !st.Failed || !strings.Contains(st.Error, `input "b"`) || !strings.Contains(st.Error, "pool's disk") {
		t.Fatalf("state %+v", st)
	}
}

// The state a docker pool's exec phase reads holds no signed link.
func TestExecManifestHoldsNoSecret(t *testing.T) {
	// Port 1 on loopback refuses: the fetch fails, and its message must not
	// carry the input's signature either.
	m := &mj.Manifest{JobID: "j", InputFiles: map[string]string{"in": "http://127.0.0.1:1/x?X-Amz-Signature=s1"}, OutputNames: []string{"o.mp4"}, AllowLoopback: true,
		FFmpegCommands: []string{"-i {{in}} {{o.mp4}}"}, UploadURL: "https://gw/files/x?sig=s2", ProgressURL: "https://gw/progress/x?sig=s3",
		ManifestURL: "https://gw/files/m?sig=s4", DiskBytes: 1 << 30}
	st := (&Runner{WorkDir: t.TempDir()}).Fetch(context.Background(), m) // fails to fetch: fine
	b := mustJSON(st)
	for _, s := range []string{"Signature=s1", "sig=s2", "sig=s3", "sig=s4", "https://"} {
		if strings.Contains(b, s) {
			t.Fatalf("the exec state holds %q: %s", s, b)
		}
	}
	if st.Job == nil || st.Job.InputFiles["in"] != "" || len(st.Job.FFmpegCommands) != 1 || st.Job.DiskBytes != 1<<30 {
		t.Fatalf("the exec state lost what exec needs: %+v", st.Job)
	}
}

// A state file rewritten by the user's ffmpeg cannot publish other files.
func TestUploadChecksReportedOutputs(t *testing.T) {
	srv, up := newServer(t, nil)
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, "outputs"), 0o755)
	m := &mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.mp4"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	st := &State{Done: true, Outputs: []mj.Output{{Name: "../.mediajobs-state.json", Size: 1}}}
	res, err := (&Runner{WorkDir: work}).Upload(context.Background(), m, st)
	if err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "does not declare") || len(up.files) != 1 {
		t.Fatalf("result %+v, %v, uploads %v", res, err, len(up.files))
	}
}
