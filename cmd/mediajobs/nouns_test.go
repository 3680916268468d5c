package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
)

// A cancel retried after the first went through (the API answers 409 with the
// cancelled job) succeeds; any other error is the command's.
func TestCancelCmdTakesARetriedCancelAsDone(t *testing.T) {
	api := &apiFlags{url: "http://127.0.0.1:1", key: "k"}
	state := func(j *client.Job) (string, mj.Status, bool) {
		if j == nil {
			return "", "", false
		}
		return j.ID, j.Status, true
	}
	conflict := errors.New("job is already cancelled")
	for _, c := range []struct {
		job     *client.Job
		err     error
		wantErr bool
	}{
		{&client.Job{ID: "a", Status: mj.StatusCancelled}, conflict, false},
		{&client.Job{ID: "a", Status: mj.StatusSucceeded}, conflict, true},
		{nil, conflict, true},
		{&client.Job{ID: "a", Status: mj.StatusCancelled}, nil, false},
	} {
		cmd := cancelCmd(api, "job", "cancel", func(context.Context, *client.Client, string) (*client.Job, error) { return c.job, c.err }, state)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SilenceUsage = true
		cmd.SetArgs([]string{"a"})
		err := cmd.Execute()
		if (err != nil) != c.wantErr {
			t.Fatalf("job %+v, error %v: command error %v, want error %v", c.job, c.err, err, c.wantErr)
		}
		if err == nil && out.String() != "job a cancelled\n" {
			t.Fatalf("printed %q", out.String())
		}
	}
}

// wait prints the final noun as JSON on stdout with -json (progress on
// stderr), and exits as ended says.
func TestWaitCmdPrintsJSONAndExitsAsEndedSays(t *testing.T) {
	api := &apiFlags{url: "http://127.0.0.1:1", key: "k"}
	failed := &exitError{1, "job a failed"}
	cmd := waitCmd(api, "job", func(context.Context, *client.Client, string, *progressUI) (*client.Job, error) {
		return &client.Job{ID: "a", Status: mj.StatusFailed}, nil
	}, func(*client.Job) error { return failed })
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--json", "a"})
	if err := cmd.Execute(); err != failed {
		t.Fatalf("error %v, want %v", err, failed)
	}
	if !strings.Contains(out.String(), `"status": "failed"`) {
		t.Fatalf("stdout %q lacks the final job", out.String())
	}
}
