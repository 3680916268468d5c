package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
)

// GET /api/pipelines/{id}/events streams the pipeline's view (as GET
// /api/pipelines/{id} answers it) whenever its record or one of its jobs
// changes, and ends once the record says it ended (docs/pipelines.md). It is
// woken by the job watch, through the hub's byJob entry of each of its jobs (the
// record lists their ids, so no job record is decoded to learn its pipeline),
// and by the pipeline watch (WatchPipelines, started beside the job watches in
// jobcache.go). A record that gains jobs (a chunked pipeline extended after its
// plan, docs/chunked.md) is re-read on that wake, and its new jobs followed from
// then on (pipelineFollow).

// notifyPipeline wakes the streams of pipeline id (its record changed).
func (h *eventHub) notifyPipeline(id string) {
	h.mu.Lock()
	var subs []*subscriber
	for s := range h.byPipeline[id] {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		s.signal(id)
	}
}

// pipelineFollow subscribes a stream to the changes of a pipeline's jobs, the
// ones its record gains included: follow is called with the record's job ids
// each time it is read, before its jobs are read, so that no change of a new
// job is missed. Used by one goroutine at a time (the stream's).
type pipelineFollow struct {
	hub  *eventHub
	sub  *subscriber
	undo map[string]func()
}

func (f *pipelineFollow) follow(ids []string) {
	if f.undo == nil {
		f.undo = map[string]func(){}
	}
	for _, id := range ids {
		if f.undo[id] == nil {
			f.undo[id] = f.hub.add(&f.hub.byJob, id, f.sub)
		}
	}
}

func (f *pipelineFollow) stop() {
	for _, u := range f.undo {
		u()
	}
	clear(f.undo)
}

// pipelineJobs reads the jobs of p through the job cache, the ones not cached
// in one batch from etcd (then cached: the watch keeps them current); a job
// not stored yet is left out, as ViewPipeline expects.
func (g *Gateway) pipelineJobs(ctx context.Context, p *mj.Pipeline) (map[string]*mj.Job, error) {
	ids := p.JobIDs()
	jobs := make(map[string]*mj.Job, len(ids))
	var missing []string
	for _, id := range ids {
		if j := g.jobs.get(id); j != nil {
			jobs[id] = j
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return jobs, nil
	}
	for _, id := range missing {
		done := g.jobs.reading(id) // a change landing during the read is kept
		defer done()
	}
	read, errs := g.Store.Jobs(ctx, missing)
	for i, j := range read {
		switch {
		case errs[i] == nil && j.Status == mj.StatusRunning:
			// A batch read leaves out progress: a running job is read again
			// with it (at most the pipeline's running jobs, once: then cached).
			if jp, err := g.Store.Job(ctx, missing[i]); err == nil {
				j = jp
			}
			fallthrough
		case errs[i] == nil:
			jobs[missing[i]] = j
			g.jobs.put(j, false)
		case mj.ErrorCode(errs[i]) != mj.ENotFound:
			return nil, errs[i]
		}
	}
	return jobs, nil
}

// pipelineEvents: GET /api/pipelines/{id}/events.
func (g *Gateway) pipelineEvents(c *fiber.Ctx) error {
	p, err := g.ownPipeline(c)
	if err != nil {
		return err
	}
	id := p.ID
	closeStream, err := g.openStream(c) // max_event_streams (streamquota.go)
	if err != nil {
		return err
	}
	// Subscribed before the first read below: no change is missed.
	sub := newSubscriber()
	unsubscribe := g.hub.add(&g.hub.byPipeline, id, sub)
	jobsOf := &pipelineFollow{hub: &g.hub, sub: sub}
	jobsOf.follow(p.JobIDs())
	done := g.streamCtx()
	st := g.newStream(c)
	startSSE(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer closeStream()
		defer unsubscribe()
		defer jobsOf.stop()
		defer g.recoverStream()
		var last []byte
		// send reads the pipeline and writes its view if it changed; it
		// reports whether to go on.
		send := func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := g.Store.Pipeline(ctx, id)
			if mj.ErrorCode(err) == mj.ENotFound {
				sse(w, "end", []byte(`{}`))
				return false
			}
			if err != nil {
				return true // etcd briefly unreachable: the backstop tries again
			}
			jobsOf.follow(p.JobIDs()) // jobs it gained since the last read
			jobs, err := g.pipelineJobs(ctx, p)
			if err != nil {
				return true
			}
			// Compared unsigned: a signed link differs at every render.
			b, _ := json.Marshal(mj.ViewPipeline(p, jobs, func(key string) string { return key }))
			if string(b) != string(last) {
				exp := g.Now().Add(g.Config.Storage.TTL)
				links := g.links()
				v, _ := json.Marshal(mj.ViewPipeline(p, jobs, func(key string) string { return links.Download(context.Background(), key, exp) }))
				st.deadline()
				if !sse(w, "pipeline", v) {
					return false
				}
				last = b
			}
			if p.Status.Terminal() {
				sse(w, "end", []byte(`{}`))
				return false
			}
			return true
		}
		if !send() {
			return
		}
		st.run(w, done, sub.wake, g.streamTimes().pipelineBackstop, func(bool) bool { return send() })
	})
	return nil
}
