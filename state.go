package mediajobs

// transitions lists every allowed status change. queued may go straight to a terminal
// state (cancelled before dispatch, or no worker could take it); running may not go
// back to queued: a re-dispatched attempt stays running.
var transitions = map[Status][]Status{
	StatusQueued:  {StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled},
	StatusRunning: {StatusSucceeded, StatusFailed, StatusCancelled},
}

// ValidateTransition reports whether a job may move from one status to another.
// A same-status "transition" is allowed: it is an update that keeps the status
// (progress, webhook delivery state). Writers that must not touch a finished job
// check Terminal themselves.
func ValidateTransition(from, to Status) error {
	if !from.Valid() || !to.Valid() {
		return Errorf(EConflict, "unknown job status %q -> %q", from, to)
	}
	if from == to {
		return nil
	}
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	if from.Terminal() {
		return Errorf(EConflict, "job is already %s", from)
	}
	return Errorf(EConflict, "job cannot go from %s to %s", from, to)
}
