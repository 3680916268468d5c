package mediajobs

import "testing"

func TestValidateTransitionEveryPair(t *testing.T) {
	all := []Status{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled}
	allowed := map[[2]Status]bool{
		{StatusQueued, StatusQueued}:     true,
		{StatusQueued, StatusRunning}:    true,
		{StatusQueued, StatusSucceeded}:  true,
		{StatusQueued, StatusFailed}:     true,
		{StatusQueued, StatusCancelled}:  true,
		{StatusRunning, StatusRunning}:   true,
		{StatusRunning, StatusSucceeded}: true,
		{StatusRunning, StatusFailed}:    true,
		{StatusRunning, StatusCancelled}: true,
		// same status: an update that keeps the status (webhook state on a finished job)
		{StatusSucceeded, StatusSucceeded}: true,
		{StatusFailed, StatusFailed}:       true,
		{StatusCancelled, StatusCancelled}: true,
	}
	for _, from := range all {
		for _, to := range all {
			err := ValidateTransition(from, to)
			if want := allowed[[2]Status{from, to}]; (err == nil) != want {
				t.Errorf("%s -> %s: err=%v, want allowed=%v", from, to, err, want)
			}
			if err != nil && ErrorCode(err) != EConflict {
				t.Errorf("%s -> %s: code %s, want conflict", from, to, ErrorCode(err))
			}
		}
	}
	if err := ValidateTransition("bogus", StatusQueued); err == nil {
		t.Error("unknown status accepted")
	}
}
