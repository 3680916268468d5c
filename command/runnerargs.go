package command

// RunnerArgs is what the runner puts before every prepared command: no banner, no
// stdin, overwrite without asking, an info-level log with each line's level tagged
// (the error message takes only the errors), and progress on file descriptor 3, a
// pipe of the runner's own. A dry run shows commands with it (docs/api.md).
func RunnerArgs() []string {
	return []string{"-hide_banner", "-nostdin", "-y", "-loglevel", "level+info", "-nostats", "-progress", "pipe:3"}
}
