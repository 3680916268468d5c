package dispatcher

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/jobspecs"
	"github.com/mediajobs/mediajobs/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// dispatchLoop dispatches every job in the queue, as it arrives.
func (d *Dispatcher) dispatchLoop(ctx context.Context) {
	d.watchPrefix(ctx, d.Store.QueuePrefix(), 15*time.Second, func(ctx context.Context, id string, del *clientv3.Event) {
		if del != nil {
			return
		}
		if err := d.dispatch(ctx, id); err != nil && ctx.Err() == nil {
			d.Log.Warn("dispatch failed; will retry", "job", id, "err", err)
			d.Store.UpdateJob(ctx, id, func(j *mj.Job) error {
				if j.Status != mj.StatusQueued {
					return errSkip
				}
				j.StatusDetail = "waiting to reach Nomad: " + err.Error()
				return nil
			})
		}
	})
}

var errSkip = mj.Errorf(mj.EConflict, "skip")

// dispatch submits one queued job to its pool's parameterized Nomad job. The
// idempotency token (job id + attempt) makes a retry after a crash between the
// dispatch and the store update return the same child instead of a second one.
func (d *Dispatcher) dispatch(ctx context.Context, id string) error {
	j, err := d.Store.Job(ctx, id)
	if err != nil {
		return err
	}
	if j.Status != mj.StatusQueued || j.NomadJobID != "" {
		return nil
	}
	attempt := j.Attempt
	if attempt == 0 {
		attempt = 1
	}
	payload, err := d.manifest(ctx, j, attempt)
	if err != nil {
		return err
	}
	wo := *d.writeOpts
	wo.IdempotencyToken = fmt.Sprintf("%s/%d", j.ID, attempt)
	resp, _, err := d.Jobs.DispatchOpts(&api.DispatchOptions{
		JobID:            jobspecs.JobID(j.Machine),
		Meta:             map[string]string{"mediajobs_job_id": j.ID, "mediajobs_attempt": fmt.Sprint(attempt)},
		Payload:          payload,
		IdPrefixTemplate: childPrefix(j.ID, attempt),
	}, &wo)
	if err != nil {
		metrics.Dispatches.WithLabelValues(j.Machine, "error").Inc()
		return fmt.Errorf("nomad dispatch: %w", err)
	}
	metrics.Dispatches.WithLabelValues(j.Machine, "ok").Inc()
	_, err = d.Store.UpdateJob(ctx, id, func(j *mj.Job) error {
		if j.Status != mj.StatusQueued || j.NomadJobID != "" {
			return errSkip // cancelled meanwhile
		}
		j.NomadJobID, j.Attempt = resp.DispatchedJobID, attempt
		j.StatusDetail = "dispatched to Nomad as " + resp.DispatchedJobID + "; waiting for a node"
		return nil
	})
	if err == errSkip {
		// Cancelled between our read and the dispatch: stop what we just started.
		d.Jobs.Deregister(resp.DispatchedJobID, false, d.writeOpts)
		return nil
	}
	if err == nil {
		d.Log.Info("dispatched", "job", id, "nomad_job", resp.DispatchedJobID)
	}
	return err
}

// manifest is the runner's dispatch payload: the job, and a signed URL under which
// it uploads this attempt's outputs and result.
func (d *Dispatcher) manifest(ctx context.Context, j *mj.Job, attempt int) ([]byte, error) {
	scope := runScope(j.ID, attempt)
	// Valid for the whole life of the attempt: queueing, the timeout, uploading.
	exp := time.Now().Add(time.Duration(j.TimeoutSeconds)*time.Second + 48*time.Hour)
	m := mj.Manifest{
		JobID: j.ID, Attempt: attempt, InputFiles: j.InputFiles, OutputNames: j.OutputNames,
		FFmpegCommands: j.FFmpegCommands, TimeoutSeconds: j.TimeoutSeconds,
		UploadURL:     d.Signer.URL("PUT", scope, scope+"{path}", exp),
		AllowLoopback: d.Config.Server.AllowLoopback,
		AllowGPU:      d.Config.Pool(j.Machine) != nil && d.Config.Pool(j.Machine).GPUs > 0,
	}
	b := mustJSON(m)
	if len(b) <= maxPayload {
		return b, nil
	}
	key := scope + "manifest.json"
	if _, err := d.Blobs.Put(ctx, key, bytes.NewReader(b), 0); err != nil {
		return nil, fmt.Errorf("store large manifest: %w", err)
	}
	return mustJSON(mj.Manifest{ManifestURL: d.Signer.URL("GET", key, key, exp)}), nil
}

// cancelLoop stops the Nomad job of every job that leaves the active set as
// cancelled (the gateway marks it; Nomad follows).
func (d *Dispatcher) cancelLoop(ctx context.Context) {
	d.watchPrefix(ctx, d.Store.ActivePrefix(), time.Hour, func(ctx context.Context, id string, del *clientv3.Event) {
		if del == nil || del.PrevKv == nil {
			return
		}
		j, err := d.Store.Job(ctx, id)
		if err != nil || j.Status != mj.StatusCancelled {
			return
		}
		if _, _, err := d.Jobs.Deregister(string(del.PrevKv.Value), false, d.writeOpts); err != nil {
			d.Log.Warn("could not stop the nomad job of a cancelled job", "job", id, "nomad_job", string(del.PrevKv.Value), "err", err)
			return
		}
		d.Log.Info("stopped cancelled job", "job", id, "nomad_job", string(del.PrevKv.Value))
	})
}
