// Package jobspecs holds the Nomad HCL2 jobspecs, one parameterized batch job per
// pool driver and the service job of a pool's warm runners (warm.nomad.hcl), and
// renders a pool's variables for them. Rendering is pure: the dispatcher hands the
// jobspec and the variables to Nomad's parse API.
package jobspecs

import (
	"embed"
	"fmt"
	"sort"
	"strconv"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
)

//go:embed *.nomad.hcl
var files embed.FS

// Rendered is a jobspec and the var-file content that fills its variables.
type Rendered struct {
	JobID     string // the parameterized job's ID in Nomad
	HCL       string
	Variables string
}

// Render returns the jobspec for pool's driver and the variables taken from pool.
// runnerCommand is the mediajobs binary the nodes run when the pool sets none.
func Render(pool *config.Pool, runnerCommand string) (Rendered, error) {
	src, err := files.ReadFile(pool.Driver + ".nomad.hcl")
	if err != nil || pool.Driver == "warm" {
		return Rendered{}, fmt.Errorf("no jobspec for driver %q", pool.Driver)
	}
	cmd := pool.RunnerCommand
	if pool.Driver == "docker" && pool.RunnerCommand == "" {
		cmd = "/usr/local/bin/mediajobs" // where the worker image has it
	}
	vars := poolVars(pool, cmd, runnerCommand)
	vars["image"] = quote(pool.Image)
	vars["cpu"], vars["memory"], vars["disk"] = strconv.Itoa(pool.CPU), strconv.Itoa(pool.Memory), strconv.Itoa(pool.Disk)
	return Rendered{JobID: mj.PoolJobID(pool.Name), HCL: string(src), Variables: varFile(vars)}, nil
}

// poolVars are the variables both jobspecs of a pool take from it: where its
// jobs are placed, what they run (cmd, else runnerCommand) and how.
func poolVars(pool *config.Pool, cmd, runnerCommand string) map[string]string {
	if cmd == "" {
		cmd = runnerCommand
	}
	gpu := config.GPU{}
	if pool.GPU != nil {
		gpu = *pool.GPU
	}
	return map[string]string{
		"pool":              quote(pool.Name),
		"runner_command":    quote(cmd),
		"datacenters":       list(pool.Datacenters),
		"node_pool":         quote(pool.NodePool),
		"constraints":       constraints(pool.Constraints),
		"gpu_count":         strconv.Itoa(gpu.Count),
		"gpu_min_memory_mb": strconv.Itoa(gpu.MinMemoryMB),
		"gpu_model":         quote(gpu.Model),
		"sandbox":           quote(pool.Sandbox),
	}
}

// RenderWarm returns the service job of a warm pool's runners (warm.nomad.hcl) and
// its variables; controlURL is where the runners lease jobs (server.public_url).
// The pool's defaults must be applied (config.Finish): its warm block's values
// are taken as they are.
func RenderWarm(pool *config.Pool, runnerCommand, controlURL string) (Rendered, error) {
	w := pool.Warm
	switch {
	case w == nil:
		return Rendered{}, fmt.Errorf("pool %q has no warm block", pool.Name)
	case pool.Driver != "raw_exec":
		return Rendered{}, fmt.Errorf("pool %q: warm runners run on raw_exec, not %q", pool.Name, pool.Driver)
	}
	src, err := files.ReadFile("warm.nomad.hcl")
	if err != nil {
		return Rendered{}, err
	}
	vars := poolVars(pool, pool.RunnerCommand, runnerCommand)
	vars["control_url"] = quote(controlURL)
	vars["count"], vars["min"], vars["max"] = strconv.Itoa(w.Count), strconv.Itoa(w.Min), strconv.Itoa(w.Max)
	vars["cpu"], vars["memory"], vars["disk"] = strconv.Itoa(w.CPU), strconv.Itoa(w.Memory), strconv.Itoa(w.Disk)
	return Rendered{JobID: mj.WarmJobID(pool.Name), HCL: string(src), Variables: varFile(vars)}, nil
}

func varFile(vars map[string]string) string {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s = %s\n", n, vars[n])
	}
	return b.String()
}

// quote renders s as an HCL string literal; strconv.Quote's escapes are valid HCL,
// and "${" / "%{" are escaped so a value can never become a template.
func quote(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q, "${", "$${")
	return strings.ReplaceAll(q, "%{", "%%{")
}

func constraints(cs []*config.Constraint) string {
	items := make([]string, len(cs))
	for i, c := range cs {
		items[i] = fmt.Sprintf("{ attribute = %s, operator = %s, value = %s }", quote(c.Attribute), quote(c.Operator), quote(c.Value))
	}
	return "[" + strings.Join(items, ", ") + "]"
}

func list(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
