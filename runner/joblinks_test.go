package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
)

// A concat list in inputs/ names its files the way commands do, inputs/<name>
// (and an earlier command's output as outputs/<name>): ffmpeg reads each entry
// relative to the list, and the job's links make inputs/inputs/ and
// inputs/outputs/ the job's own directories, so the job succeeds with the
// parts joined, under ffmpeg's default -safe 1.
func TestConcatListNamesInputsAsCommandsDo(t *testing.T) {
	data := clip(t)
	list := []byte("file 'inputs/a.mp4'\nfile 'inputs/b.mp4'\nfile 'outputs/c.mp4'\n")
	srv, up := newServer(t, map[string][]byte{"clip.mp4": data, "list.txt": list})
	res := run(t, srv, mj.Manifest{
		InputFiles:  map[string]string{"a.mp4": srv.URL + "/in/clip.mp4", "b.mp4": srv.URL + "/in/clip.mp4", "list.txt": srv.URL + "/in/list.txt"},
		OutputNames: []string{"c.mp4", "joined.mp4"},
		FFmpegCommands: []string{
			"-i inputs/a.mp4 -c copy outputs/c.mp4",
			"-f concat -i inputs/list.txt -c copy outputs/joined.mp4",
		},
		AllowLoopback: true,
	})
	if !res.Succeeded {
		t.Fatalf("failed: %s", res.ErrorMessage)
	}
	var joined *mj.Output
	for i := range res.Outputs {
		if res.Outputs[i].Name == "joined.mp4" {
			joined = &res.Outputs[i]
		}
	}
	if joined == nil || joined.Probe == nil || joined.Probe.DurationSeconds == nil || *joined.Probe.DurationSeconds < 2.5 {
		t.Fatalf("joined output %+v: want three 1-second parts", joined)
	}
	if len(up.files["outputs/joined.mp4"]) == 0 {
		t.Fatal("joined.mp4 was not uploaded")
	}
}

// An input named inputs (or outputs) keeps its name: no link replaces it.
func TestJobLinksLeaveAnInputOfThatName(t *testing.T) {
	data := clip(t)
	srv, _ := newServer(t, map[string][]byte{"clip.mp4": data})
	res := run(t, srv, mj.Manifest{
		InputFiles:     map[string]string{"inputs": srv.URL + "/in/clip.mp4"},
		OutputNames:    []string{"o.mp4"},
		FFmpegCommands: []string{"-i inputs/inputs -c copy outputs/o.mp4"},
		AllowLoopback:  true,
	})
	if !res.Succeeded || !strings.Contains(res.Outputs[0].Name, "o.mp4") {
		t.Fatalf("an input named inputs: %v %s", res.Succeeded, res.ErrorMessage)
	}
}

// The clients of inputs and destinations do not retry what the address policy
// refused (it would be refused again); they retry what may pass next time.
func TestRetryUnlessRefused(t *testing.T) {
	ctx := context.Background()
	refused := fmt.Errorf("dial: %w", netguard.ErrRefused)
	if retry, _ := retryUnlessRefused(ctx, nil, refused); retry {
		t.Fatal("a refused dial is retried")
	}
	if retry, _ := retryUnlessRefused(ctx, nil, errors.New("dial tcp 203.0.113.1:80: connect: connection refused")); !retry {
		t.Fatal("a connection error is not retried")
	}
}
