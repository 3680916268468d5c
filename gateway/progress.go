package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// progressMinGap bounds the etcd writes of one job's progress (runners send every
// 2 s): a 60-second run costs at most 20 small writes.
const progressMinGap = 3 * time.Second

// progress stores a runner's progress report on its job's progress key. The link is signed for one
// attempt ("jobs/<id>/<attempt>/progress"); reports for another attempt or a
// finished job, or closer together than progressMinGap, are dropped.
func (g *Gateway) progress(c *fiber.Ctx) error {
	key, err := url.PathUnescape(strings.TrimPrefix(c.Path(), "/progress/"))
	if err != nil {
		return mj.Errorf(mj.ENotFound, "no such job")
	}
	q := url.Values{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { q.Add(string(k), string(v)) })
	if err := g.Signer.Verify("PROGRESS", key, q, g.Now()); err != nil {
		return mj.Errorf(mj.EForbidden, "%v", err)
	}
	parts := strings.Split(key, "/") // jobs, id, attempt, progress
	if len(parts) != 4 || parts[0] != "jobs" || parts[3] != "progress" {
		return mj.Errorf(mj.ENotFound, "no such job")
	}
	id := strings.Clone(parts[1]) // kept in progressAt: must not alias fiber's buffer
	attempt, err := strconv.Atoi(parts[2])
	if err != nil {
		return mj.Errorf(mj.ENotFound, "no such job")
	}
	body, err := g.jsonBody(c)
	if err != nil {
		return err
	}
	var p mj.Progress
	if err := json.Unmarshal(body, &p); err != nil {
		return mj.Errorf(mj.EValidation, "progress must be a JSON object: %v", err)
	}
	now := g.Now()
	if last, ok := g.progressAt.Load(id); ok && now.Sub(last.(time.Time)) < progressMinGap {
		return c.JSON(fiber.Map{"data": fiber.Map{"stored": false}})
	}
	g.progressAt.Store(id, now)
	g.pruneProgressAt(now)
	p.UpdatedAt = now.UTC()
	stored, err := g.storeProgress(c.UserContext(), id, attempt, &p)
	if err != nil || !stored {
		g.progressAt.Delete(id) // finished, another attempt, or no such job
	}
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"stored": stored}})
}

// storeProgress writes p on the job's progress key if attempt is the job's current,
// unfinished attempt. The job comes from the cache; the write is conditioned on
// its revision, so a stale copy costs one read from etcd, never a report stored
// for a finished job.
func (g *Gateway) storeProgress(ctx context.Context, id string, attempt int, p *mj.Progress) (bool, error) {
	j, err := g.job(ctx, id)
	for try := 0; ; try++ {
		if err != nil {
			return false, err
		}
		if j.Status.Terminal() || max(j.Attempt, 1) != attempt {
			return false, nil
		}
		err = g.Store.PutProgress(ctx, j, attempt, p)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, store.ErrStale) || try == 2 {
			return false, err
		}
		if j, err = g.Store.Job(ctx, id); err == nil {
			g.jobs.put(j, false)
		}
	}
}

// progressPruneEvery is how often progressAt drops the times of jobs that stopped
// reporting (finished, or their runner died): only the last progressMinGap matters.
const progressPruneEvery = time.Minute

func (g *Gateway) pruneProgressAt(now time.Time) {
	last := g.progressPruned.Load()
	if now.UnixNano()-last < int64(progressPruneEvery) || !g.progressPruned.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	g.progressAt.Range(func(id, t any) bool {
		if now.Sub(t.(time.Time)) > progressPruneEvery {
			g.progressAt.Delete(id)
		}
		return true
	})
}
