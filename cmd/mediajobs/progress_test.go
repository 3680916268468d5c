package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
)

// A chunked job's lines show its progress across its chunks (read with its
// steps), kept for the updates from its event stream that come without them,
// and its verification's verdict at the end; another job's lines are as they
// were.
func TestStageShowsChunks(t *testing.T) {
	var out bytes.Buffer
	ui := newProgress(&out)
	s := ui.stage("0123456789")
	enc := func(st ...mj.Status) []mj.StepView {
		var jobs []mj.StepJob
		for _, x := range st {
			jobs = append(jobs, mj.StepJob{Status: x})
		}
		return []mj.StepView{{Name: "plan", Status: mj.StatusSucceeded}, {Name: "encode", Status: mj.StatusRunning, Jobs: jobs}}
	}
	job := func(status mj.Status, steps []mj.StepView, verification string) *client.Job {
		return &client.Job{ID: "0123456789", Status: status, Parallel: &mj.ParallelView{Mode: mj.ParallelChunked, Steps: steps, Verification: json.RawMessage(verification)}}
	}
	s.update(job(mj.StatusRunning, enc(mj.StatusSucceeded, mj.StatusRunning, mj.StatusRunning, mj.StatusQueued), ""))
	s.update(job(mj.StatusRunning, nil, "")) // from the event stream: the same line, not printed again
	s.update(job(mj.StatusRunning, enc(mj.StatusSucceeded, mj.StatusSucceeded, mj.StatusSucceeded, mj.StatusRunning), ""))
	s.finish(job(mj.StatusSucceeded, enc(mj.StatusSucceeded, mj.StatusSucceeded, mj.StatusSucceeded, mj.StatusSucceeded), `{"pass":true}`))
	s2 := ui.stage("plain")
	s2.finish(&client.Job{ID: "plain", Status: mj.StatusSucceeded})
	want := "job 0123456789 running, chunks 1/4 done, 2 running\n" +
		"job 0123456789 running, chunks 3/4 done, 1 running\n" +
		"job 0123456789 succeeded (chunks 4/4 done; verification passed)\n" +
		"job plain succeeded\n"
	if got := out.String(); got != want {
		t.Fatalf("lines:\n%s\nwant:\n%s", got, want)
	}
	if l := chunksLine(job(mj.StatusFailed, nil, `{"pass":false,"failures":["x"]}`)); l != "verification failed" {
		t.Fatalf("a failed report: %q", l)
	}
	if l := chunksLine(&client.Job{Parallel: &mj.ParallelView{Mode: mj.ParallelSingle}}); l != "" || strings.Contains(l, "chunks") {
		t.Fatalf("a job run as one: %q", l)
	}
}
