package gateway

import (
	"context"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

// createChecker runs a create's checks of the account's limits without the write;
// *store.Store has it.
type createChecker interface {
	CheckCreate(ctx context.Context, j *mj.Job, defaults store.Limits) error
}

// dryRunView is the answer to a create with dry_run=true (docs/api.md).
type dryRunView struct {
	DryRun bool       `json:"dry_run"`
	Job    mj.JobView `json:"job"`
	// Commands: each command as the worker runs it, ffmpeg's argv in full.
	Commands  []dryRunCommand `json:"commands"`
	Placement placement       `json:"placement"`
	// Parallel: the chunked verdict and the steps that would run (parallel.go).
	Parallel *dryRunParallel `json:"parallel,omitempty"`
}

type dryRunCommand struct {
	Argv []string `json:"argv"`
}

// placement is where the job's pool runs it: what its Nomad job asks of a node.
type placement struct {
	Machine     string       `json:"machine"`
	NomadJob    string       `json:"nomad_job"`
	Driver      string       `json:"driver"`
	Datacenters []string     `json:"datacenters,omitempty"`
	NodePool    string       `json:"node_pool,omitempty"`
	CPU         int          `json:"cpu_mhz"`
	MemoryMB    int          `json:"memory_mb"`
	DiskMB      int          `json:"disk_mb"`
	GPUs        int          `json:"gpus"`
	GPUModel    string       `json:"gpu_model,omitempty"`
	GPUMemoryMB int          `json:"gpu_min_memory_mb,omitempty"`
	Constraints []constraint `json:"constraints"`
}

type constraint struct {
	Attribute string `json:"attribute"`
	Operator  string `json:"operator,omitempty"`
	Value     string `json:"value,omitempty"`
}

// dryRun answers what a create of j would store and run, after every check a
// create makes (the caller made the others), storing nothing: no job, no
// idempotency record, no use counted against a limit.
func (g *Gateway) dryRun(c *fiber.Ctx, j *mj.Job) error {
	if err := g.Store.CheckCreate(c.UserContext(), j, g.limitDefaults()); err != nil {
		return err
	}
	pool := g.Config.Pool(j.Machine)
	spec := commandSpec(g.Config, pool, j)
	cmds := make([]dryRunCommand, len(j.FFmpegCommands))
	for i, s := range j.FFmpegCommands {
		argv, err := command.Prepare(s, spec) // checked by newJob: cannot fail here
		if err != nil {
			return err
		}
		cmds[i].Argv = append(append([]string{"ffmpeg"}, command.RunnerArgs()...), argv...)
	}
	v := g.view(j)
	v.ID = "" // nothing was stored: there is no job to ask for
	return c.JSON(fiber.Map{"data": dryRunView{DryRun: true, Job: v, Commands: cmds, Placement: poolPlacement(pool), Parallel: parallelDryRun(j.Parallel)}})
}

// commandSpec is the command.Spec newJob checked j's commands against.
func commandSpec(cfg *config.Config, pool *config.Pool, j *mj.Job) command.Spec {
	spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{}, AllowGPU: pool.GPUs() > 0, NoNVENC: noNVENC(cfg, pool), Unsandboxed: pool.Unsandboxed()}
	for name := range j.InputFiles {
		spec.Inputs[name] = true
	}
	for _, name := range j.OutputNames {
		spec.Outputs[name] = true
	}
	return spec
}

func poolPlacement(p *config.Pool) placement {
	pl := placement{Machine: p.Name, NomadJob: mj.PoolJobID(p.Name), Driver: p.Driver, Datacenters: p.Datacenters,
		NodePool: p.NodePool, CPU: p.CPU, MemoryMB: p.Memory, DiskMB: p.Disk, GPUs: p.GPUs(), Constraints: []constraint{}}
	if p.GPU != nil {
		pl.GPUModel, pl.GPUMemoryMB = p.GPU.Model, p.GPU.MinMemoryMB
	}
	for _, c := range p.Constraints {
		pl.Constraints = append(pl.Constraints, constraint{c.Attribute, c.Operator, c.Value})
	}
	return pl
}

// dryRunLocalFile reports whether u names, in a dry run, a local file that the
// client would upload as a temporary file before a real create.
func dryRunLocalFile(u string) bool {
	pu, err := url.Parse(u)
	return err == nil && (pu.Scheme == "http" || pu.Scheme == "https") && strings.HasPrefix(pu.Path, "/files/dry-run/")
}

// boolQuery reads an optional true/false query parameter.
func boolQuery(c *fiber.Ctx, name string) (bool, error) {
	switch v := c.Query(name); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		e := mj.Errorf(mj.EValidation, "%s must be true or false, not %q", name, v)
		e.Details = map[string]string{name: "must be true or false"}
		return false, e
	}
}
