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

type commander struct {
	c    Commander
	done func(*exec.Cmd)
}

// WithCommander makes Probe and Verify run their tools through c under ctx.
// done, when not nil, is called with each of c's commands once it has exited
// (or was not started): the runner's frees what its sandbox held.
func WithCommander(ctx context.Context, c Commander, done func(*exec.Cmd)) context.Context {
	return context.WithValue(ctx, commanderKey{}, commander{c, done})
}

// toolCommand is the command that runs name with args under ctx: ctx's
// Commander's, else name run directly. done is to be called once it has
// exited, or when it is not started.
func toolCommand(ctx context.Context, name string, args ...string) (cmd *exec.Cmd, done func(), err error) {
	c, ok := ctx.Value(commanderKey{}).(commander)
	if !ok {
		return exec.CommandContext(ctx, name, args...), func() {}, nil
	}
	if cmd, err = c.c(ctx, name, args...); err != nil || c.done == nil {
		return cmd, func() {}, err
	}
	return cmd, func() { c.done(cmd) }, nil
}
