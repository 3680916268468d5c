package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Progress lives on its own small key per job, progress/<id>, never on the job
// record: a report every few seconds would otherwise rewrite the whole job and keep
// each copy in etcd's history. The key is attached to a lease, so it disappears
// about a minute after the reports stop (a runner that died), and it is deleted in
// the transaction that ends the job or its attempt (derivedOps).

const (
	// progressTTL is the lease of progress keys: how long a last report outlives
	// its runner at most.
	progressTTL = 60 * time.Second
	// progressLeaseReuse is how long one lease serves new reports, so a gateway
	// grants one lease a quarter-minute rather than one per report.
	progressLeaseReuse = 15 * time.Second
)

// ProgressRecord is the value of a progress key: the attempt that reported, and
// what it reported.
type ProgressRecord struct {
	Attempt  int         `json:"attempt"`
	Progress mj.Progress `json:"progress"`
	// Revision is the key's etcd revision (not stored): the newer report wins.
	Revision int64 `json:"-"`
}

// ErrStale means the job changed since the caller read it: read it again.
var ErrStale = errors.New("job changed since it was read")

type progressLease struct {
	mu sync.Mutex
	id clientv3.LeaseID
	at time.Time
}

func (s *Store) progressKey(id string) string { return s.p + "progress/" + id }

// ProgressPrefix holds the progress keys (watched by gateways).
func (s *Store) ProgressPrefix() string { return s.p + "progress/" }

// lease returns a lease for new progress keys, granting a fresh one when the last
// is older than progressLeaseReuse (or was lost: renew).
func (s *Store) lease(ctx context.Context, renew bool) (clientv3.LeaseID, error) {
	l := s.progress
	l.mu.Lock()
	defer l.mu.Unlock()
	if !renew && l.id != 0 && time.Since(l.at) < progressLeaseReuse {
		return l.id, nil
	}
	resp, err := s.cli.Grant(ctx, int64((progressTTL+progressLeaseReuse)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("grant progress lease: %w", err)
	}
	l.id, l.at = resp.ID, time.Now()
	return l.id, nil
}

// PutProgress stores a report of attempt for job j as the caller read it (with its
// Revision). It is written only if the job is unchanged since, so a report can
// never outlive the transition that finished the job or its attempt: on ErrStale,
// read the job again and decide anew.
func (s *Store) PutProgress(ctx context.Context, j *mj.Job, attempt int, p *mj.Progress) error {
	b, err := json.Marshal(ProgressRecord{Attempt: attempt, Progress: *p})
	if err != nil {
		return err
	}
	for renew := false; ; renew = true {
		lease, err := s.lease(ctx, renew)
		if err != nil {
			return err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(s.jobKey(j.ID)), "=", j.Revision)).
			Then(clientv3.OpPut(s.progressKey(j.ID), string(b), clientv3.WithLease(lease))).
			Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !renew {
			continue // the lease expired under us (etcd was unreachable for a while)
		}
		if err != nil {
			return fmt.Errorf("store progress: %w", err)
		}
		if !resp.Succeeded {
			return ErrStale
		}
		return nil
	}
}

// withProgress sets j.Progress from a progress key's value when it belongs to the
// job's current, unfinished attempt.
func withProgress(j *mj.Job, kvs []*mvccpb.KeyValue) {
	if len(kvs) == 0 || j.Status.Terminal() {
		return
	}
	var rec ProgressRecord
	if json.Unmarshal(kvs[0].Value, &rec) == nil && rec.Attempt == max(j.Attempt, 1) {
		j.Progress, j.ProgressRevision = &rec.Progress, kvs[0].ModRevision
	}
}

// progressOf sets the Progress of the unfinished jobs from their progress keys.
func (s *Store) progressOf(ctx context.Context, jobs []*mj.Job) error {
	var ops []clientv3.Op
	var idx []int
	for i, j := range jobs {
		if j != nil && !j.Status.Terminal() {
			ops, idx = append(ops, clientv3.OpGet(s.progressKey(j.ID))), append(idx, i)
		}
	}
	for from := 0; from < len(ops); from += 100 {
		to := min(from+100, len(ops))
		resp, err := s.cli.Txn(ctx).Then(ops[from:to]...).Commit()
		if err != nil {
			return fmt.Errorf("read progress: %w", err)
		}
		for k, r := range resp.Responses {
			withProgress(jobs[idx[from+k]], r.GetResponseRange().Kvs)
		}
	}
	return nil
}

// WatchProgress calls fn with every progress report written (or, with rec nil,
// deleted) after revision from, and the revision of that write, until ctx ends
// or the watch fails; it returns why.
func (s *Store) WatchProgress(ctx context.Context, from int64, fn func(id string, rec *ProgressRecord, rev int64)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefix := s.ProgressPrefix()
	for resp := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			id := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			var rec ProgressRecord
			if ev.Type == clientv3.EventTypeDelete || json.Unmarshal(ev.Kv.Value, &rec) != nil {
				fn(id, nil, ev.Kv.ModRevision)
				continue
			}
			rec.Revision = ev.Kv.ModRevision
			fn(id, &rec, rec.Revision)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("progress watch closed")
}
