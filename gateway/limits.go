package gateway

import (
	"context"
	"errors"
	"strconv"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// accountLimiter is what the store tells of an account's limits of amounts held
// and enforces in a create (docs/limits.md); *store.Store has it.
type accountLimiter interface {
	CreateJobWithin(ctx context.Context, j *mj.Job, idem *store.Idempotency, defaults store.Limits) (*mj.Job, error)
	AccountLimits(ctx context.Context, account string, defaults store.Limits) (store.Limits, store.Usage, store.Schedule, error)
}

// queuedRetryAfter is the Retry-After, in seconds, of a create refused for
// max_queued_jobs: the account's queue shrinks as its jobs start.
const queuedRetryAfter = 10

// limitDefaults are the configured limits of amounts held.
func (g *Gateway) limitDefaults() store.Limits {
	l := g.Config.Limits
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return store.Limits{MaxQueuedJobs: val(l.MaxQueuedJobs), MaxJobBytes: val(l.MaxJobBytes), MaxTimeoutSeconds: val(l.MaxTimeoutSeconds),
		MaxStorageBytes: val(l.MaxStorageBytes), MaxEventStreams: val(l.MaxEventStreams), MaxInputBytes: val(l.MaxInputBytes)}
}

// createWithin stores j within its account's limits; a create over one is
// refused with quotaExceeded, with Retry-After where waiting helps.
func (g *Gateway) createWithin(c *fiber.Ctx, j *mj.Job, idem *store.Idempotency) (*mj.Job, error) {
	stored, err := g.Store.CreateJobWithin(c.UserContext(), j, idem, g.limitDefaults())
	var e *mj.Error
	if errors.As(err, &e) && e.Code == mj.EQuotaExceeded && e.Details["limit"] == "max_queued_jobs" {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(queuedRetryAfter))
	}
	return stored, err
}

// getAccount: GET /api/account, the caller's account, its limits and what it
// holds now (docs/limits.md).
func (g *Gateway) getAccount(c *fiber.Ctx) error {
	ctx, id := c.UserContext(), account(c)
	a, err := g.Store.Account(ctx, id)
	if err != nil {
		return err
	}
	l, u, sc, err := g.Store.AccountLimits(ctx, id, g.limitDefaults())
	if err != nil {
		return err
	}
	running := int64(g.Config.Limits.MaxRunningPerAccount)
	if sc.MaxRunningPerPool != nil {
		running = int64(*sc.MaxRunningPerPool)
	}
	weight := sc.Weight
	if weight == 0 {
		weight = 1
	}
	return c.JSON(fiber.Map{"data": fiber.Map{
		"id":     a.ID,
		"name":   a.Name,
		"weight": weight,
		"limits": fiber.Map{
			"max_running_per_account": running,
			"max_queued_jobs":         l.MaxQueuedJobs,
			"max_job_bytes":           l.MaxJobBytes,
			"max_timeout_seconds":     l.MaxTimeoutSeconds,
			"max_storage_bytes":       l.MaxStorageBytes,
			"max_event_streams":       l.MaxEventStreams,
			"max_input_bytes":         l.MaxInputBytes,
		},
		"usage": fiber.Map{
			"queued_jobs":   u.QueuedJobs,
			"job_bytes":     u.JobBytes,
			"storage_bytes": u.StorageBytes,
			"event_streams": u.EventStreams,
		},
	}})
}
