package mediajobs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"
)

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

// The verbs below are how a job's status changes after its create: each sets the
// fields that go with its status together, and the terminal ones (Succeed,
// Fail, Cancel) arm the webhook (ArmWebhook). The store checks every change
// with ValidateTransition, and arms a webhook a terminal write left unarmed.

// Run marks j running, with detail (prefixed with the attempt after the
// first). StartedAt, the job's first start, and AttemptStartedAt are the
// caller's: they come from different clocks on different paths.
func (j *Job) Run(detail string) {
	j.Status, j.StatusDetail = StatusRunning, attemptDetail(j.Attempt, detail)
}

// Succeed ends j as succeeded at now, with detail (usually empty).
func (j *Job) Succeed(now time.Time, detail string) {
	j.Status, j.FinishedAt, j.StatusDetail = StatusSucceeded, &now, detail
	j.ArmWebhook()
}

// Fail ends j as failed at now, with msg, the error_message a person acts on.
func (j *Job) Fail(now time.Time, msg string) {
	j.Status, j.FinishedAt, j.StatusDetail, j.ErrorMessage = StatusFailed, &now, "", msg
	j.ArmWebhook()
}

// Cancel ends j as cancelled at now, with detail saying by whom.
func (j *Job) Cancel(now time.Time, detail string) {
	j.Status, j.FinishedAt, j.StatusDetail = StatusCancelled, &now, detail
	j.ArmWebhook()
}

// Release records at now that dep, a job j awaits, succeeded: keys are the
// blob keys of its outputs that j's inputs name, by input name. Once j awaits
// nothing, it enters its pool's queue (store.derivedOps) as of now: its
// queued_at is when it could first run, so it takes its turn behind the jobs
// queued before and the queue's age gauges do not count its wait.
func (j *Job) Release(dep string, keys map[string]string, now time.Time) {
	j.Awaits = slices.DeleteFunc(slices.Clone(j.Awaits), func(id string) bool { return id == dep })
	if len(j.Awaits) == 0 {
		j.Awaits, j.StatusDetail, j.QueuedAt = nil, "", now
	} else {
		j.StatusDetail = j.AwaitingDetail()
	}
	if len(keys) > 0 {
		// A copy: the store's read shares its maps with the record it read.
		in := make(map[string]string, len(j.InputKeys)+len(keys))
		maps.Copy(in, j.InputKeys)
		maps.Copy(in, keys)
		j.InputKeys = in
	}
}

// RetryOrFail sends j, whose attempt was lost for why, back to the queue as its
// next attempt, or fails it when that was its last of maxAttempts. A retried
// job keeps its status (a running job stays running): clients never see it go
// backwards.
func (j *Job) RetryOrFail(why string, now time.Time, maxAttempts int) {
	attempt := max(j.Attempt, 1)
	if attempt >= maxAttempts {
		j.Fail(now, fmt.Sprintf("attempt %d of %d failed: %s", attempt, maxAttempts, why))
		return
	}
	j.NomadJobID, j.Attempt, j.DispatchedAt, j.PlacementReason, j.AttemptStartedAt = "", attempt+1, nil, "", nil
	j.Worker = nil
	j.StatusDetail = fmt.Sprintf("attempt %d of %d: retrying because %s", attempt+1, maxAttempts, why)
}

// ArmWebhook makes a finished job's webhook pending, under a new delivery id
// that every attempt of the delivery carries, when it has a webhook_url and
// none was armed before.
func (j *Job) ArmWebhook() {
	if j.Status.Terminal() && j.WebhookURL != "" && j.Webhook == nil {
		j.Webhook = &WebhookState{Status: WebhookPending, DeliveryID: NewDeliveryID()}
	}
}

// NewDeliveryID is a random (version 4) UUID.
func NewDeliveryID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func attemptDetail(attempt int, detail string) string {
	if attempt > 1 {
		return fmt.Sprintf("attempt %d: %s", attempt, detail)
	}
	return detail
}
