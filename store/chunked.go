package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CreateChunkedJob stores j, the parent of a chunked job (docs/chunked.md),
// and its pipeline p (mj.NewChunkedPipeline: its plan holds the plan step's
// job) in one transaction, within the account's limits as CreateJobWithin
// stores a job: a parent is never without its pipeline. j is never queued
// (derivedOps); p's job is stored as any pipeline's (MaterialisePipeline, by
// the gateway at once, else by the leader past its grace).
func (s *Store) CreateChunkedJob(ctx context.Context, j *mj.Job, p *mj.Pipeline, idem *Idempotency, defaults Limits) (*mj.Job, error) {
	if !j.ChunkedParent() || p.Owner != j.ID || j.Parallel.PipelineID != p.ID {
		return nil, fmt.Errorf("store chunked job: %s is not the parent of pipeline %s", j.ID, p.ID)
	}
	if idem != nil {
		sum := sha256.Sum256([]byte(idem.Key))
		j.IdemHash = hex.EncodeToString(sum[:])
	}
	beside, err := s.besideBytes(j, idem)
	if err != nil {
		return nil, err
	}
	b, err := encodeRecord(j, beside)
	if err != nil {
		return nil, err
	}
	pb, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(pb) > maxPipelineRecord {
		return nil, mj.Errorf(mj.EValidation, "the chunked job's plan takes %d bytes as stored; at most %d", len(pb), maxPipelineRecord)
	}
	extra := append([]clientv3.Op{
		clientv3.OpPut(s.pipelineKey(p.ID), string(pb)),
		clientv3.OpPut(s.pipelineIndexKey(p), p.ID),
	}, s.pipelineDerivedOps(nil, p)...)
	return s.createAlone(ctx, j, b, beside, idem, defaults, extra...)
}

// ExtendPipeline appends steps to pipeline id and plans their jobs, in one
// write of its record unless done already (its steps hold steps[0]'s name):
// MaterialisePipeline then stores the jobs, each once; a pipeline stopped
// or ended is not extended. Returns the pipeline as stored, and whether this
// call extended it; a validation error when the
// record would grow past what one pipeline holds (it never will fit), a
// quotaExceeded one when the jobs would take the account past its
// max_queued_jobs (defaults, replaced by the account's own).
func (s *Store) ExtendPipeline(ctx context.Context, id string, steps []mj.PipelineStep, jobs []*mj.Job, defaults Limits) (*mj.Pipeline, bool, error) {
	cur, err := s.Pipeline(ctx, id)
	if err != nil {
		return nil, false, err
	}
	for _, st := range cur.Steps {
		if st.Name == steps[0].Name {
			return cur, false, nil // done already
		}
	}
	if cur.Stop != "" || cur.Status.Terminal() {
		return cur, false, nil // stopped (its job cancelled): nothing more runs
	}
	// The jobs count as queued: the account's max_queued_jobs bounds them,
	// read now (not in the write's transaction: a race of the account's
	// creates may take it past by a few, as a create's margin allows).
	u, err := retryTransient(ctx, func(bool) (usageRead, error) { return s.readUsage(ctx, cur.AccountID) })
	if err != nil {
		return nil, false, err
	}
	if l := u.overrides.Apply(defaults); l.MaxQueuedJobs > 0 && u.queued+int64(len(jobs)) > l.MaxQueuedJobs {
		return nil, false, QuotaError("max_queued_jobs", l.MaxQueuedJobs, u.queued)
	}
	extended := false
	p, err := s.UpdatePipeline(ctx, id, func(p *mj.Pipeline) error {
		extended = false
		for _, st := range p.Steps {
			if st.Name == steps[0].Name {
				return errNoChange
			}
		}
		if p.Status.Terminal() || p.Stop != "" {
			return errNoChange
		}
		p.Steps = append(p.Steps, steps...)
		p.Plan = append(p.Plan, jobs...)
		if b, err := json.Marshal(p); err != nil {
			return err
		} else if len(b) > maxPipelineRecord {
			return mj.Errorf(mj.EValidation, "its %d jobs take %d bytes as planned, over the %d one pipeline's record holds: fewer chunks (a longer chunk_seconds, a lower chunked.max_chunks) or a shorter command", len(p.Plan), len(b), maxPipelineRecord)
		}
		extended = true
		return nil
	})
	if err == errNoChange {
		p, err = s.Pipeline(ctx, id)
		return p, false, err
	}
	return p, extended, err
}

var errNoChange = fmt.Errorf("no change")
