package runner

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestOutputsProbedAtOnce: outputs that need an ffprobe process are probed
// a few at once (an HLS ladder's segments), and reported in their order. The
// fake ffprobe waits, up to 20 s, for a second one to be running.
func TestOutputsProbedAtOnce(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: outputs are probed one at a time")
	}
	ff := testenv.Binary(t, "ffmpeg")
	seen := t.TempDir()
	probe := fakeBinary(t, "ffprobe", fmt.Sprintf(`d=%s
touch "$d/running.$$"
i=0
while [ "$(ls "$d" | grep -c running)" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
[ "$(ls "$d" | grep -c running)" -ge 2 ] && touch "$d/saw.$$"
rm "$d/running.$$"
echo '{"format":{"format_name":"wav","duration":"0.1"},"streams":[]}'
`, seen))
	srv, _ := newServer(t, nil)
	names := []string{"a.wav", "b.wav", "c.wav", "d.wav"}
	cmd := "-f lavfi -i sine=d=0.1"
	for _, n := range names {
		cmd += " -map 0 outputs/" + n
	}
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: names, FFmpegCommands: []string{cmd},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 120}
	res, err := (&Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: ff, FFprobe: probe}).Run(context.Background(), &m)
	if err != nil || !res.Succeeded {
		t.Fatalf("job: %v %+v", err, res)
	}
	var got []string
	for _, o := range res.Outputs {
		if o.Probe == nil || o.Probe.Format != "wav" {
			t.Fatalf("output %s probed as %+v", o.Name, o.Probe)
		}
		got = append(got, o.Name)
	}
	if !slices.Equal(got, names) {
		t.Fatalf("outputs %v, want %v in order", got, names)
	}
	entries, _ := filepath.Glob(filepath.Join(seen, "saw.*"))
	if len(entries) == 0 {
		t.Fatal("no ffprobe saw another running: outputs were probed one at a time")
	}
}
