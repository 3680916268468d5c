package client

import (
	"context"
	"net/http"
)

// DryRun is what a create would store and run (POST /api/ffmpeg?dry_run=true).
type DryRun struct {
	// Job is the job as it would be stored; its ID is empty.
	Job Job `json:"job"`
	// Commands are ffmpeg's full argv for each command, as the worker runs it.
	Commands []struct {
		Argv []string `json:"argv"`
	} `json:"commands"`
	Placement Placement `json:"placement"`
	// Parallel: with a create's Parallel, the verdict and the steps that
	// would run (docs/chunked.md); nil without.
	Parallel *DryRunParallel `json:"parallel,omitempty"`
}

// DryRunParallel is a dry run's chunked verdict: mode "chunked" or "single"
// (with Reason), and the steps; the chunks are decided by the plan step.
type DryRunParallel struct {
	Mode         string  `json:"mode"`
	Reason       string  `json:"reason,omitempty"`
	ChunkSeconds float64 `json:"chunk_seconds,omitempty"`
	MaxWorkers   int     `json:"max_workers,omitempty"`
	MaxChunks    int     `json:"max_chunks,omitempty"`
	SceneCuts    bool    `json:"scene_cuts,omitempty"`
	Steps        []struct {
		Name string `json:"name"`
		Runs string `json:"runs"`
	} `json:"steps,omitempty"`
	Note string `json:"note,omitempty"`
}

// Placement is where a job's pool runs it: what its Nomad job asks of a node.
type Placement struct {
	Machine        string   `json:"machine"`
	NomadJob       string   `json:"nomad_job"`
	Driver         string   `json:"driver"`
	Datacenters    []string `json:"datacenters,omitempty"`
	NodePool       string   `json:"node_pool,omitempty"`
	CPUMHz         int      `json:"cpu_mhz"`
	MemoryMB       int      `json:"memory_mb"`
	DiskMB         int      `json:"disk_mb"`
	GPUs           int      `json:"gpus"`
	GPUModel       string   `json:"gpu_model,omitempty"`
	GPUMinMemoryMB int      `json:"gpu_min_memory_mb,omitempty"`
	Constraints    []struct {
		Attribute string `json:"attribute"`
		Operator  string `json:"operator,omitempty"`
		Value     string `json:"value,omitempty"`
	} `json:"constraints"`
}

// DryRun runs every check a Create runs and returns what it would store and
// run, or the same *Error; nothing is stored and no quota is used.
func (c *Client) DryRun(ctx context.Context, r CreateRequest) (*DryRun, error) {
	if r.OutputFiles == nil {
		r.OutputFiles = []string{}
	}
	var d DryRun
	if err := c.do(ctx, http.MethodPost, "/api/ffmpeg?dry_run=true", r, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// LocalFileURL is how a dry run names a local file that a real run would upload
// first: a path under the service's /files/, which a dry run takes as its own.
func (c *Client) LocalFileURL(name string) string { return c.base + "/files/dry-run/" + name }

// Account is the caller's account, its limits and what it holds now
// (GET /api/account); a way to check a key, too.
func (c *Client) Account(ctx context.Context) (map[string]any, error) {
	var a map[string]any
	if err := c.do(ctx, http.MethodGet, "/api/account", nil, nil, &a); err != nil {
		return nil, err
	}
	return a, nil
}
