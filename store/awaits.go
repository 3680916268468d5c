package store

import (
	"context"
	"log/slog"
	"slices"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A job whose inputs name other jobs' outputs (job:<id>/<output>) waits for
// them outside its pool's queue: derivedOps writes awaits/<dep>/<id> for each
// job it awaits, and its queue key only once it awaits nothing. The leader
// releases it (dispatcher/awaits.go) when a job it awaits ends: every
// awaits/ key when it starts and every resync (Follow), and the waiters of
// each job that ends as it ends (TailDone, Waiters).

// awaitsKey says that job id waits for an output of job dep.
func (s *Store) awaitsKey(dep, id string) string { return s.p + "awaits/" + dep + "/" + id }

// AwaitsPrefix holds the awaits keys.
func (s *Store) AwaitsPrefix() string { return s.p + "awaits/" }

// awaiting reports whether j is unfinished and awaits another job.
func awaiting(j *mj.Job) bool { return j != nil && !j.Status.Terminal() && len(j.Awaits) > 0 }

// awaitsOps are the puts and deletes of j's awaits keys after old (derivedOps).
func (s *Store) awaitsOps(old, j *mj.Job) []clientv3.Op {
	var was, now []string
	if awaiting(old) {
		was = old.Awaits
	}
	if awaiting(j) {
		now = j.Awaits
	}
	var ops []clientv3.Op
	for _, dep := range now {
		if !slices.Contains(was, dep) {
			ops = append(ops, clientv3.OpPut(s.awaitsKey(dep, j.ID), ""))
		}
	}
	for _, dep := range was {
		if !slices.Contains(now, dep) {
			ops = append(ops, clientv3.OpDelete(s.awaitsKey(dep, old.ID)))
		}
	}
	return ops
}

// Waiters lists the jobs that await an output of job dep.
func (s *Store) Waiters(ctx context.Context, dep string) ([]string, error) {
	ids, _, err := s.JobIDs(ctx, s.awaitsKey(dep, ""), 0)
	return ids, err
}

// TailDone calls fn with the id of every job that ends after revision from (0:
// from now on; its done/ key is written), until ctx ends. Unlike Follow it
// lists nothing: a change missed while the watch was down (or compacted away)
// is for the caller's own resync to find.
func (s *Store) TailDone(ctx context.Context, from int64, log *slog.Logger, fn func(ctx context.Context, id string)) {
	prefix := s.DonePrefix()
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if from > 0 {
			opts = append(opts, clientv3.WithRev(from+1))
		}
		for resp := range s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
			if err := resp.Err(); err != nil {
				log.Warn("watch of finished jobs failed; watching again", "err", err)
				from = 0 // compacted, or the leader lost: from now on (the caller resyncs)
				break
			}
			for _, ev := range resp.Events {
				from = ev.Kv.ModRevision
				if ev.Type == clientv3.EventTypePut {
					fn(ctx, IDFromKey(string(ev.Kv.Key)))
				}
			}
		}
		sleep(ctx, time.Second)
	}
}
