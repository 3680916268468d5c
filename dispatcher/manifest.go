package dispatcher

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
)

// manifest is the runner's dispatch payload: the job, and a signed URL under which
// it uploads this attempt's outputs and result.
func (d *Dispatcher) manifest(ctx context.Context, j *mj.Job, attempt int) ([]byte, error) {
	scope := mj.RunScope(j.ID, attempt)
	// Valid for the whole life of the attempt: queueing, the timeout, uploading.
	exp := time.Now().Add(time.Duration(j.TimeoutSeconds)*time.Second + 48*time.Hour)
	pool := d.Config.Pool(j.Machine)
	m := mj.Manifest{
		JobID: j.ID, Attempt: attempt, InputFiles: d.inputURLs(ctx, j, exp), OutputNames: j.OutputNames,
		FFmpegCommands: j.FFmpegCommands, TimeoutSeconds: j.TimeoutSeconds,
		// Half the backstop's grace: the result is up before it looks (resultFirst).
		ReportSeconds:     max(int(d.TimeoutGrace/time.Second)/2, 1),
		UploadURL:         d.Signer.URL("PUT", scope, scope+"{path}", exp),
		ProgressURL:       d.Signer.URLFor("/progress/", "PROGRESS", scope+"progress", scope+"progress", exp),
		UploadsURL:        d.Signer.URLFor("/upload-urls/", "UPLOADS", scope+"uploads", scope+"uploads", exp),
		MaxOutputFiles:    d.Config.Server.MaxOutputFiles,
		AllowLoopback:     d.Config.Server.AllowLoopback,
		AllowCIDRs:        d.Config.Server.AllowCIDRs,
		AllowHosts:        d.Config.Server.AllowHosts,
		DestAllowLoopback: d.Config.Server.DestinationAllowLoopback,
		DestAllowCIDRs:    d.Config.Server.DestinationAllowCIDRs,
		DestAllowHosts:    d.Config.Server.DestinationAllowHosts,
		ControlPlane:      d.Config.ControlPlane(),
		AllowGPU:          pool != nil && pool.GPUs() > 0,
		MaxInputBytes:     j.InputCap(),
		Chunk:             j.Chunk,
	}
	if pool != nil {
		m.DiskBytes = int64(pool.Disk) << 20 // Nomad's MB are MiB
	}
	b := mustJSON(m)
	if len(b) <= maxPayload {
		return b, nil
	}
	// A random name: the manifest holds the job's input URLs and upload links, and
	// its key must not be derivable from the job id an output link shows.
	key := scope + "manifest-" + uuid.NewString() + ".json"
	if _, err := d.storage().Put(ctx, key, bytes.NewReader(b), 0); err != nil {
		return nil, fmt.Errorf("store large manifest: %w", err)
	}
	return mustJSON(mj.Manifest{ManifestURL: d.links().URL(ctx, "GET", key, key, exp)}), nil
}

// maxPayload stays under Nomad's 16 KiB dispatch payload limit; a larger manifest
// goes to the blob store and the payload carries a signed URL to it.
const maxPayload = 15 * 1024

// inputURLs are the URLs the runner fetches j's inputs from: as the client gave
// them, but an input naming another job's output (job:<id>/<output>) is a
// signed link to that output in storage (InputKeys, set when it was released;
// docs/references.md), fetched like a temporary file.
func (d *Dispatcher) inputURLs(ctx context.Context, j *mj.Job, exp time.Time) map[string]string {
	if len(j.InputKeys) == 0 {
		return j.InputFiles
	}
	in := maps.Clone(j.InputFiles)
	for name, key := range j.InputKeys {
		in[name] = d.links().URL(ctx, "GET", key, key, exp)
	}
	return in
}
