// Package mcp is `mediajobs mcp`: a Model Context Protocol server for agents,
// a client of a running service (docs/mcp.md). Over stdio (ServeStdio) it uses
// one API key and may read and write local files; over streamable HTTP (HTTP)
// each session uses the bearer key of the request that opened it, and tools
// take URLs only (the server's disk is not the agent's).
package mcp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves MCP on stdin and stdout as c until ctx ends or the client
// goes; the tools may read local input files and save outputs locally.
func ServeStdio(ctx context.Context, c *client.Client) error {
	return newServer(c, true).Run(ctx, &sdk.StdioTransport{})
}

// tools is the tools' state: the service's client, and whether they may touch
// the local disk (stdio) or take URLs only (HTTP).
type tools struct {
	c     *client.Client
	local bool
}

const instructions = `mediajobs runs ffmpeg commands as jobs on hosted workers (CPU or NVIDIA GPU pools).
A job names its inputs (URLs, or local files that are uploaded first), lists the files its commands write,
and gives one or more ffmpeg commands without the leading "ffmpeg", referring to files as {{name}}.
Use check_job to validate a job before running it, run_job to run it and wait for the result,
probe_media to learn what a file contains (duration, streams) before writing a command,
run_pipeline to run several jobs as one graph (steps that take other steps' outputs, fan-out per item, fan-in).`

const commandRules = `Write each command as ffmpeg's arguments without "ffmpeg" itself, and refer to files only
as {{name}}: an input by its key in input_files, an output by its entry in output_files (or inputs/<name>, outputs/<name>).
Rules the service enforces (a refused job says which rule and what to do instead):
- every file a command writes as a result must be listed in output_files; other relative names are scratch files in the job's directory;
- no absolute paths, no "..", no URLs or protocols inside commands: put URLs in input_files;
- output names: [A-Za-z0-9][A-Za-z0-9._-]*, optionally one directory (hls/index.m3u8), one counter for sequences (frame_%03d.png);
- output_files may be [] for an analysis that writes no file (e.g. "-i {{audio}} -af loudnorm=print_format=json -f null -"): its result is the logs and the job's analysis;
- commands run in order, in the same directory, so a later command may read an earlier one's scratch or output files.
Example: input_files {"video": "https://example.com/in.mp4"}, output_files ["thumb.jpg", "small.mp4"],
ffmpeg_commands ["-i {{video}} -ss 1 -frames:v 1 {{thumb.jpg}}", "-i {{video}} -vf scale=640:-2 -c:v libx264 -c:a aac {{small.mp4}}"].`

func newServer(c *client.Client, local bool) *sdk.Server {
	t := &tools{c: c, local: local}
	s := sdk.NewServer(&sdk.Implementation{Name: "mediajobs", Title: "mediajobs: ffmpeg jobs", Version: mj.Version},
		&sdk.ServerOptions{Instructions: instructions})
	inputs := "input_files: a name for each input and where it is: an http(s) URL"
	if local {
		inputs += ", or a path to a local file (uploaded first as a temporary file)"
	}
	sdk.AddTool(s, &sdk.Tool{Name: "run_job", Title: "Run an ffmpeg job",
		Description: "Run ffmpeg commands on the service and wait for the result. " + inputs + ".\n" + commandRules +
			"\nReturns the job: status (succeeded/failed/cancelled, or queued/running if wait_seconds passed first), error_message, " +
			"output_files (signed download links), outputs (size, duration, streams), logs, usage. " +
			"With parallel (chunked encoding of one long encode across workers), also chunks: the progress across the chunks and the verification's verdict. " +
			"A job the service refuses returns its message and details naming the field at fault; fix it and call again."},
		t.runJob)
	sdk.AddTool(s, &sdk.Tool{Name: "check_job", Title: "Check a job without running it",
		Description: "Run every check run_job would (commands, names, URLs, machine, account limits) without running or storing anything " +
			"(a dry run; local files are not uploaded). Returns ffmpeg's full argv for each command as the worker would run it and where, " +
			"or the same error run_job would get.\n" + commandRules, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		t.checkJob)
	sdk.AddTool(s, &sdk.Tool{Name: "get_job", Title: "Get a job", Description: "Get a job by id: its status, progress while running, outputs and their links, error_message, logs and usage; " +
		"for a chunked job (parallel), chunks: how many of its chunks are done, running or failed, each chunk's state, the other steps, and the verification's verdict and checks.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.getJob)
	sdk.AddTool(s, &sdk.Tool{Name: "list_jobs", Title: "List jobs", Description: "List the account's jobs, newest first, optionally by status.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listJobs)
	sdk.AddTool(s, &sdk.Tool{Name: "wait_job", Title: "Wait for a job", Description: "Wait until a job ends (or wait_seconds pass) and return it (a chunked job with its chunks, as get_job).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.waitJob)
	sdk.AddTool(s, &sdk.Tool{Name: "cancel_job", Title: "Cancel a job", Description: "Cancel a queued or running job; returns it. A job that already ended is returned as it ended.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}}, t.cancelJob)
	sdk.AddTool(s, &sdk.Tool{Name: "job_logs", Title: "Read a job's ffmpeg logs",
		Description: "Read an ended job's full ffmpeg log of one command (1-based), or of every command: what ffmpeg printed, " +
			"including its error. Long logs keep their last max_bytes (default 20000).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.jobLogs)
	probeWhat := "an http(s) URL"
	if local {
		probeWhat += " or a local file path (uploaded first)"
	}
	sdk.AddTool(s, &sdk.Tool{Name: "probe_media", Title: "Probe a media file",
		Description: "Find out what a media file holds, as ffmpeg reads it: container format, duration, bitrate and each stream " +
			"(codec, resolution, frame rate, sample rate, channels). The file is " + probeWhat + ". Runs a short job that writes no file."},
		t.probe)
	addPipelineTools(s, t, inputs)
	return s
}

// toolError words an API error for an agent: the message, then each field at fault.
func toolError(err error) error {
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n- %s: %s", k, e.Details[k])
	}
	return errors.New(b.String())
}

func ptr[T any](v T) *T { return &v }
