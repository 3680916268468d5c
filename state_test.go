package mediajobs

import (
	"regexp"
	"testing"
	"time"
)

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

// Each terminal verb sets its status with its fields, passes ValidateTransition
// from running, and arms the webhook once, when the job has a webhook_url.
func TestTerminalVerbsArmTheWebhookOnce(t *testing.T) {
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for name, end := range map[string]func(*Job){
		"succeed": func(j *Job) { j.Succeed(now, "") },
		"fail":    func(j *Job) { j.Fail(now, "it broke") },
		"cancel":  func(j *Job) { j.Cancel(now, "cancelled by the client") },
		"retry on the last attempt": func(j *Job) {
			j.Attempt = 3
			j.RetryOrFail("its node was lost", now, 3)
		},
	} {
		j := &Job{Status: StatusRunning, StatusDetail: "running", WebhookURL: "https://example.com/h"}
		end(j)
		if !j.Status.Terminal() || j.FinishedAt == nil || !j.FinishedAt.Equal(now) {
			t.Errorf("%s: %s finished %v", name, j.Status, j.FinishedAt)
		}
		if err := ValidateTransition(StatusRunning, j.Status); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if j.Webhook == nil || j.Webhook.Status != WebhookPending || !uuid.MatchString(j.Webhook.DeliveryID) {
			t.Fatalf("%s: webhook %+v", name, j.Webhook)
		}
		id := j.Webhook.DeliveryID
		j.ArmWebhook()
		if j.Webhook.DeliveryID != id {
			t.Errorf("%s: armed again under a new delivery id", name)
		}
		if j.Status == StatusFailed && j.ErrorMessage == "" {
			t.Errorf("%s: failed with no error_message", name)
		}
		quiet := &Job{Status: StatusRunning}
		end(quiet)
		if quiet.Webhook != nil {
			t.Errorf("%s: armed a webhook for a job with no webhook_url", name)
		}
	}
}

// A lost attempt before the last goes back to the queue as the next attempt,
// still running, with nothing of the lost one's child.
func TestRetryOrFailRetriesBeforeTheLast(t *testing.T) {
	now := time.Now()
	j := &Job{Status: StatusRunning, Attempt: 1, NomadJobID: "c", DispatchedAt: &now, AttemptStartedAt: &now, PlacementReason: "x", Worker: &Worker{}}
	j.RetryOrFail("its node was lost", now, 3)
	if j.Status != StatusRunning || j.Attempt != 2 || j.NomadJobID != "" || j.DispatchedAt != nil || j.AttemptStartedAt != nil || j.PlacementReason != "" || j.Worker != nil || j.Webhook != nil {
		t.Fatalf("retried: %+v", j)
	}
	if j.StatusDetail != "attempt 2 of 3: retrying because its node was lost" {
		t.Fatalf("detail %q", j.StatusDetail)
	}
	j.Run("running on warm runner a1")
	if j.StatusDetail != "attempt 2: running on warm runner a1" {
		t.Fatalf("run detail %q", j.StatusDetail)
	}
}
