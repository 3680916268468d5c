package chunked

import (
	"context"
	"os/exec"
)

// Commander makes the command that runs a tool (ffprobe, ffmpeg) with args:
// the runner's runs it in its sandbox, in the job's directory, where Probe's
// and Verify's paths are relative to.
type Commander func(ctx context.Context, name string, args ...string) (*exec.Cmd, error)

type commanderKey struct{}

// WithCommander makes Probe and Verify run their tools through c under ctx.
func WithCommander(ctx context.Context, c Commander) context.Context {
	return context.WithValue(ctx, commanderKey{}, c)
}

// toolCommand is the command that runs name with args under ctx: ctx's
// Commander's, else name run directly.
func toolCommand(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	if c, ok := ctx.Value(commanderKey{}).(Commander); ok {
		return c(ctx, name, args...)
	}
	return exec.CommandContext(ctx, name, args...), nil
}
