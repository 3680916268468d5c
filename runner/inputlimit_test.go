package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// The account's max_input_bytes bounds the sum of a job's inputs: the input that
// crosses it is not kept, the job fails naming the limit, and the inputs within
// it were fetched.
func TestInputsCappedAtMaxInputBytes(t *testing.T) {
	srv, _ := newServer(t, map[string][]byte{"a": make([]byte, 3<<20), "b": make([]byte, 3<<20)})
	m := mj.Manifest{InputFiles: map[string]string{"a": srv.URL + "/in/a", "b": srv.URL + "/in/b"}, AllowLoopback: true,
		DiskBytes: 1 << 30, MaxInputBytes: 5 << 20,
		OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-i {{a}} -i {{b}} {{o.wav}}"}}
	work := t.TempDir()
	st := (&Runner{WorkDir: work}).Fetch(context.Background(), &m)
	if !st.Failed || !strings.Contains(st.Error, `input "b"`) || !strings.Contains(st.Error, "max_input_bytes (5242880)") {
		t.Fatalf("state %+v", st)
	}
	if st.InputBytes != 3<<20 {
		t.Fatalf("fetched %d bytes; want input a's %d", st.InputBytes, 3<<20)
	}
	if _, err := os.Stat(filepath.Join(work, "inputs", "b")); !os.IsNotExist(err) {
		t.Fatalf("the input over the limit was kept: %v", err)
	}
	// Within it, both are fetched.
	m.MaxInputBytes = 6 << 20
	if st := (&Runner{WorkDir: t.TempDir()}).Fetch(context.Background(), &m); st.Failed {
		t.Fatalf("within max_input_bytes: %+v", st)
	}
}
