package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Warm runners (docs/warm.md) lease jobs through three kinds of keys:
//
//	warm/idle/<pool>/<alloc>  a runner waiting for a job, under its poll's etcd lease
//	warm/run/<pool>/<alloc>   the job handed to it, under the same lease, which the
//	                          runner renews while the job runs
//	warm/done/<run>           the runner reported (or gave the job back): the
//	                          dispatcher applies it and deletes the key
//
// A run key that goes without a done key (the lease lapsed: runner killed, node
// lost, partition) sends the job back to the queue as a new attempt.

// WarmIdle is a runner waiting for a job.
type WarmIdle struct {
	Pool  string    `json:"pool"`
	Alloc string    `json:"alloc"`
	Lease int64     `json:"lease"` // the poll's etcd lease
	Since time.Time `json:"since"`
	Rev   int64     `json:"-"` // the key's mod revision
}

// WarmRun is a job handed to a warm runner.
type WarmRun struct {
	Run      string          `json:"run"` // a UUID: the upload prefix of this run
	JobID    string          `json:"job_id"`
	Attempt  int             `json:"attempt"`
	Pool     string          `json:"pool"`
	Alloc    string          `json:"alloc"`
	Lease    int64           `json:"lease"`
	Manifest json.RawMessage `json:"manifest"`
	// Started: the runner renewed the lease once, so it has the job. A run that
	// lapses before is one its runner never got (it went away while its poll
	// was answered): the attempt did not run.
	Started bool `json:"started,omitempty"`
	// Long: the job does not fit the warm block's max_job_seconds (it has the
	// pool's longer default timeout, or asked for more): at most the pool's
	// runners less its reserve run such jobs at once.
	Long bool  `json:"long,omitempty"`
	Rev  int64 `json:"-"` // the key's mod revision
	// Created is the key's create revision: it names the run (a re-put, as
	// MarkWarmStarted's, keeps it; a new run is a new key).
	Created int64 `json:"-"`
}

// WarmDone is a run that ended on its runner's word.
type WarmDone struct {
	Run     string `json:"run"`
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	Pool    string `json:"pool"`
	Alloc   string `json:"alloc"`
	// Outcome: "reported" (result.json is up), or why the runner gave the job back
	// without a result ("stopped": its allocation is stopping; a worker fault).
	Outcome string `json:"outcome"`
	Why     string `json:"why,omitempty"`
	// At is when the run ended (FinishWarmRun): a result reported and not
	// readable yet is read again for a while from then, not retried at once.
	At time.Time `json:"at,omitempty"`
}

// ErrWarmGone: the idle runner or the run a call named is no longer there (its
// lease lapsed, or another call took it).
var ErrWarmGone = mj.Errorf(mj.EConflict, "the warm runner's lease is gone")

// WarmPrefix is where all warm keys live (one watch follows them all).
func (s *Store) WarmPrefix() string                { return s.p + "warm/" }
func (s *Store) WarmIdlePrefix(pool string) string { return s.p + "warm/idle/" + pool + "/" }
func (s *Store) WarmRunPrefix() string             { return s.p + "warm/run/" }
func (s *Store) WarmDonePrefix() string            { return s.p + "warm/done/" }
func (s *Store) WarmIdleKey(pool, alloc string) string {
	return s.WarmIdlePrefix(pool) + alloc
}
func (s *Store) WarmRunKey(pool, alloc string) string { return s.WarmRunPrefix() + pool + "/" + alloc }
func (s *Store) warmDoneKey(run string) string        { return s.WarmDonePrefix() + run }

// PutWarmIdle says a runner waits for a job, under lease; it returns the key's
// revision (a watch for the runner's run key starts after it).
func (s *Store) PutWarmIdle(ctx context.Context, w WarmIdle) (int64, error) {
	resp, err := s.cli.Put(ctx, s.WarmIdleKey(w.Pool, w.Alloc), string(mustJSON(w)), clientv3.WithLease(clientv3.LeaseID(w.Lease)))
	if err != nil {
		return 0, fmt.Errorf("put warm idle key: %w", err)
	}
	return resp.Header.Revision, nil
}

// StopWaiting ends a runner's wait, whose idle key PutWarmIdle wrote at rev:
// the key goes (unless a later poll of the runner wrote it again), unless a job
// was handed to the runner meanwhile, which it returns.
func (s *Store) StopWaiting(ctx context.Context, pool, alloc string, rev int64) (*WarmRun, error) {
	runKey, idleKey := s.WarmRunKey(pool, alloc), s.WarmIdleKey(pool, alloc)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(runKey), "=", 0)).
		Then(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(idleKey), "=", rev)}, []clientv3.Op{clientv3.OpDelete(idleKey)}, nil)).
		Else(clientv3.OpGet(runKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("end a warm runner's wait: %w", err)
	}
	if resp.Succeeded {
		return nil, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, nil
	}
	return decodeRun(kvs[0])
}

// WarmRunOf reads the run handed to a runner; nil when none.
func (s *Store) WarmRunOf(ctx context.Context, pool, alloc string) (*WarmRun, error) {
	resp, err := s.cli.Get(ctx, s.WarmRunKey(pool, alloc))
	if err != nil {
		return nil, fmt.Errorf("read warm run: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return decodeRun(resp.Kvs[0])
}

func decodeRun(kv *mvccpb.KeyValue) (*WarmRun, error) {
	var r WarmRun
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, fmt.Errorf("decode warm run: %w", err)
	}
	r.Rev, r.Created = kv.ModRevision, kv.CreateRevision
	return &r, nil
}

// WarmIdleRunners lists a pool's waiting runners, longest waiting first.
func (s *Store) WarmIdleRunners(ctx context.Context, pool string) ([]WarmIdle, error) {
	resp, err := s.cli.Get(ctx, s.WarmIdlePrefix(pool), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list warm runners of pool %s: %w", pool, err)
	}
	out := make([]WarmIdle, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var w WarmIdle
		if json.Unmarshal(kv.Value, &w) != nil || w.Lease == 0 {
			continue
		}
		w.Rev = kv.ModRevision
		out = append(out, w)
	}
	return out, nil
}

// OfferWarm hands job id to the idle runner w: in one transaction fn changes the
// job (it records run's child), w's idle key goes and the run key is written
// under w's lease. ErrWarmGone when w stopped waiting first; fn's own error when
// it refuses.
func (s *Store) OfferWarm(ctx context.Context, id string, w WarmIdle, run *WarmRun, fn func(*mj.Job) error) (*mj.Job, error) {
	idleKey := s.WarmIdleKey(w.Pool, w.Alloc)
	for attempt := 0; ; attempt++ {
		old, rev, err := s.job(ctx, id)
		if err != nil {
			return nil, err
		}
		j, ops, err := s.next(old, fn)
		if err != nil {
			return nil, err
		}
		run.Attempt = max(j.Attempt, 1)
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(s.jobKey(id)), "=", rev),
			clientv3.Compare(clientv3.ModRevision(idleKey), "=", w.Rev),
			// Never over a run the runner still holds (the dispatcher would see
			// no delete of it): its next poll ends that one first.
			clientv3.Compare(clientv3.CreateRevision(s.WarmRunKey(w.Pool, w.Alloc)), "=", 0),
		}
		ops = append(ops, clientv3.OpDelete(idleKey),
			clientv3.OpPut(s.WarmRunKey(w.Pool, w.Alloc), string(mustJSON(run)), clientv3.WithLease(clientv3.LeaseID(w.Lease))))
		resp, err := s.commit(ctx, cmps, ops, nil)
		if err != nil {
			return nil, fmt.Errorf("hand a job to a warm runner: %w", err)
		}
		if resp.Succeeded {
			j.Revision = resp.Header.Revision
			return j, nil
		}
		g, err := s.cli.Get(ctx, idleKey)
		if err != nil {
			return nil, fmt.Errorf("hand a job to a warm runner: %w", err)
		}
		if len(g.Kvs) == 0 || g.Kvs[0].ModRevision != w.Rev {
			return nil, ErrWarmGone
		}
		if r, err := s.WarmRunOf(ctx, w.Pool, w.Alloc); err != nil || r != nil {
			return nil, ErrWarmGone // busy after all: the next runner
		}
		if attempt >= 50 {
			return nil, mj.Errorf(mj.EConflict, "job %s is being changed concurrently; try again", id)
		}
	}
}

// MarkWarmStarted records that r's runner has its job (Started), if r is still
// the run its key holds; ErrWarmGone if not.
func (s *Store) MarkWarmStarted(ctx context.Context, r *WarmRun) error {
	c := *r
	c.Started = true
	key := s.WarmRunKey(r.Pool, r.Alloc)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.Rev)).
		Then(clientv3.OpPut(key, string(mustJSON(c)), clientv3.WithLease(clientv3.LeaseID(r.Lease)))).Commit()
	if err != nil {
		return fmt.Errorf("mark a warm run started: %w", err)
	}
	if !resp.Succeeded {
		return ErrWarmGone
	}
	return nil
}

// FinishWarmRun records that a runner's run ended (d.Run must be the run its
// run key holds now): the run key goes and the done key stays for the
// dispatcher. ErrWarmGone when the run is no longer the runner's (its lease
// lapsed, the job went on without it): what it reports is refused. The write
// is conditioned on the key's create revision, which names the run, not on its
// mod revision: the runner's first renewal (MarkWarmStarted) re-puts the key,
// and must not make done lose to it.
func (s *Store) FinishWarmRun(ctx context.Context, d WarmDone) error {
	cur, err := s.WarmRunOf(ctx, d.Pool, d.Alloc)
	if err != nil {
		return err
	}
	if cur == nil || cur.Run != d.Run || cur.JobID != d.JobID || cur.Attempt != d.Attempt {
		return ErrWarmGone
	}
	if d.At.IsZero() {
		d.At = time.Now().UTC()
	}
	runKey := s.WarmRunKey(d.Pool, d.Alloc)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(runKey), "=", cur.Created)).
		Then(clientv3.OpDelete(runKey), clientv3.OpPut(s.warmDoneKey(d.Run), string(mustJSON(d)))).Commit()
	if err != nil {
		return fmt.Errorf("record a warm run's end: %w", err)
	}
	if !resp.Succeeded {
		return ErrWarmGone
	}
	return nil
}

// WarmDoneRuns lists the runs that ended and wait for the dispatcher.
func (s *Store) WarmDoneRuns(ctx context.Context) ([]WarmDone, error) {
	resp, err := s.cli.Get(ctx, s.WarmDonePrefix(), clientv3.WithPrefix(), clientv3.WithLimit(1000))
	if err != nil {
		return nil, fmt.Errorf("list ended warm runs: %w", err)
	}
	out := make([]WarmDone, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var d WarmDone
		if json.Unmarshal(kv.Value, &d) != nil || d.Run == "" {
			// Undecodable: nothing can apply it; it goes.
			s.cli.Delete(ctx, string(kv.Key))
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// WarmDoneOf reads the done key of run; nil when none.
func (s *Store) WarmDoneOf(ctx context.Context, run string) (*WarmDone, error) {
	resp, err := s.cli.Get(ctx, s.warmDoneKey(run))
	if err != nil {
		return nil, fmt.Errorf("read ended warm run: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var d WarmDone
	if err := json.Unmarshal(resp.Kvs[0].Value, &d); err != nil {
		return nil, fmt.Errorf("decode ended warm run: %w", err)
	}
	return &d, nil
}

// DeleteWarmDone forgets an applied run (fenced on a term's store).
func (s *Store) DeleteWarmDone(ctx context.Context, run string) error {
	_, err := s.batch(ctx, []clientv3.Op{clientv3.OpDelete(s.warmDoneKey(run))})
	return err
}

// WarmRuns lists every run handed out and not ended, by run.
func (s *Store) WarmRuns(ctx context.Context) (map[string]WarmRun, error) {
	resp, err := s.cli.Get(ctx, s.WarmRunPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list warm runs: %w", err)
	}
	out := make(map[string]WarmRun, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeRun(kv)
		if err == nil {
			out[r.Run] = *r
		}
	}
	return out, nil
}

// IsWarmGone tells ErrWarmGone.
func IsWarmGone(err error) bool { return errors.Is(err, ErrWarmGone) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
