package jobspecs

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// controlPlaneSpec is the control plane's jobspec (not embedded: the dispatcher
// never registers it; an operator runs it).
const controlPlaneSpec = "../deploy/nomad/mediajobs.nomad.hcl"

// controlPlaneVarPath is the Nomad Variable the templates read: the job's own
// path, which its tasks may read with no ACL policy.
const controlPlaneVarPath = "nomad/jobs/mediajobs"

var nomadVarRe = regexp.MustCompile(`nomadVar "([^"]+)"`)

func parseControlPlane(t *testing.T, jobs *api.Jobs, vars string) *api.Job {
	t.Helper()
	src, err := os.ReadFile(controlPlaneSpec)
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return job
}

func group(t *testing.T, job *api.Job, name string) *api.TaskGroup {
	t.Helper()
	for _, g := range job.TaskGroups {
		if *g.Name == name {
			return g
		}
	}
	t.Fatalf("job has no group %q", name)
	return nil
}

// TestControlPlaneJobspec proves a real Nomad agent parses, validates and plans
// deploy/nomad/mediajobs.nomad.hcl with the properties docs/scaling.md promises: two
// gateways with a Nomad-native /readyz check on a dynamic port, two dispatchers,
// the config rendered from the documented Nomad Variable, and a gateway
// kill_timeout above the longest ?wait=true.
func TestControlPlaneJobspec(t *testing.T) {
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	jobs := agent.Client.Jobs()
	job := parseControlPlane(t, jobs, "image = \"mediajobs:test\"\n")
	if *job.ID != "mediajobs" || *job.Type != "service" || len(job.TaskGroups) != 2 {
		t.Fatalf("job %s type %s with %d groups", *job.ID, *job.Type, len(job.TaskGroups))
	}
	if want := "nomad/jobs/" + *job.ID; controlPlaneVarPath != want {
		t.Fatalf("variable path %s is not the job's own %s", controlPlaneVarPath, want)
	}

	gw, disp := group(t, job, "gateway"), group(t, job, "dispatcher")
	if *gw.Count != 2 || *disp.Count != 2 {
		t.Fatalf("counts: gateway %d, dispatcher %d; want 2 and 2", *gw.Count, *disp.Count)
	}
	// /metrics on a port of its own, never the public one (server.metrics_listen).
	if len(gw.Networks) != 1 || len(gw.Networks[0].DynamicPorts) != 2 || gw.Networks[0].DynamicPorts[0].Label != "http" || gw.Networks[0].DynamicPorts[1].Label != "metrics" {
		t.Fatalf("gateway network %+v: want dynamic ports \"http\" and \"metrics\"", gw.Networks)
	}
	if len(gw.Services) != 2 || gw.Services[1].PortLabel != "metrics" || len(gw.Services[1].Checks) != 0 {
		t.Fatalf("gateway services %+v", gw.Services)
	}
	svc := gw.Services[0]
	if svc.Provider != "nomad" || svc.PortLabel != "http" || len(svc.Checks) != 1 {
		t.Fatalf("gateway service %+v", svc)
	}
	if c := svc.Checks[0]; c.Type != "http" || c.Path != "/readyz" || c.PortLabel != "" && c.PortLabel != "http" {
		t.Fatalf("gateway check %+v", c)
	}

	for _, g := range []*api.TaskGroup{gw, disp} {
		if len(g.Tasks) != 1 {
			t.Fatalf("group %s: %d tasks", *g.Name, len(g.Tasks))
		}
		task := g.Tasks[0]
		args := strings.Join(anyStrings(task.Config["args"]), " ")
		if task.Driver != "docker" || task.Config["image"] != "mediajobs:test" || args != *g.Name+" -config ${NOMAD_TASK_DIR}/mediajobs.hcl" {
			t.Fatalf("task %s: driver %s config %v", task.Name, task.Driver, task.Config)
		}
		var cfg, env *api.Template
		for _, tmpl := range task.Templates {
			m := nomadVarRe.FindAllStringSubmatch(*tmpl.EmbeddedTmpl, -1)
			if len(m) == 0 {
				t.Fatalf("task %s: template %s reads no Nomad Variable", task.Name, *tmpl.DestPath)
			}
			for _, sub := range m {
				if sub[1] != controlPlaneVarPath {
					t.Fatalf("task %s: template %s reads %s, docs/scaling.md documents %s", task.Name, *tmpl.DestPath, sub[1], controlPlaneVarPath)
				}
			}
			switch {
			case *tmpl.DestPath == "local/mediajobs.hcl" && !*tmpl.Envvars:
				cfg = tmpl
			case *tmpl.Envvars && strings.HasPrefix(*tmpl.DestPath, "secrets/"):
				env = tmpl
			}
		}
		if cfg == nil || env == nil {
			t.Fatalf("task %s: want a config template at local/mediajobs.hcl and an env template under secrets/: %+v", task.Name, task.Templates)
		}
		if !strings.Contains(*env.EmbeddedTmpl, "MEDIAJOBS_SIGNING_SECRET=") || strings.Contains(*cfg.EmbeddedTmpl, ".signing_secret") {
			t.Fatalf("task %s: the signing secret must come through the env template only", task.Name)
		}
		if *g.Name == "gateway" {
			// The drain: longer than the longest request a gateway holds.
			m := regexp.MustCompile(`wait_limit\s*=\s*"([^"]+)"`).FindStringSubmatch(*cfg.EmbeddedTmpl)
			if m == nil {
				t.Fatalf("gateway config template sets no wait_limit:\n%s", *cfg.EmbeddedTmpl)
			}
			wait, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatal(err)
			}
			if *task.KillTimeout <= wait {
				t.Fatalf("gateway kill_timeout %s is not above wait_limit %s", *task.KillTimeout, wait)
			}
			if gw.ShutdownDelay == nil || *gw.ShutdownDelay <= 0 {
				t.Fatalf("gateway has no shutdown_delay: the service stays registered while it stops")
			}
		} else if task.Identity == nil || !task.Identity.Env || task.Env["NOMAD_ADDR"] != "unix://${NOMAD_SECRETS_DIR}/api.sock" {
			t.Fatalf("dispatcher reaches Nomad how? identity %+v env %v", task.Identity, task.Env)
		}
	}

	readme, err := os.ReadFile("../docs/scaling.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "nomad var put "+controlPlaneVarPath) {
		t.Fatalf("docs/scaling.md does not document `nomad var put %s`", controlPlaneVarPath)
	}

	resp, _, err := jobs.Validate(job, nil)
	if err != nil || resp.Error != "" || len(resp.ValidationErrors) > 0 || resp.Warnings != "" {
		t.Fatalf("validate: %v %+v", err, resp)
	}
	plan, _, err := jobs.Plan(job, true, nil)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if plan.Warnings != "" || plan.Diff == nil || plan.Diff.Type != "Added" {
		t.Fatalf("plan: warnings %q diff %+v", plan.Warnings, plan.Diff)
	}
	if !agent.DockerHealthy() {
		t.Logf("docker driver not healthy: placements not checked (failed: %v)", plan.FailedTGAllocs)
		return
	}
	for _, name := range []string{"gateway", "dispatcher"} {
		if f := plan.FailedTGAllocs[name]; f != nil {
			t.Fatalf("group %s does not place: %+v", name, f)
		}
		if u := plan.Annotations.DesiredTGUpdates[name]; u == nil || u.Place != 2 {
			t.Fatalf("group %s: planned %+v, want 2 placements", name, u)
		}
	}
}

// TestControlPlaneRunsOnNomad runs the jobspec on a real agent: the templates
// render from the Nomad Variable, the gateways listen on their Nomad ports and pass
// the /readyz check, and a dispatcher reaches Nomad through the Task API socket
// and registers the default pool's job. "docker" runs the jobspec as written, on an
// image imported like deploy/Dockerfile's final stage (no registry here to build
// that), with S3 storage (MinIO) and its keys from the variable; "raw_exec" swaps
// each task's docker config for raw_exec running this tree's mediajobs.
func TestControlPlaneRunsOnNomad(t *testing.T) {
	t.Run("raw_exec", func(t *testing.T) {
		agent, err := testenv.StartNomad(testenv.NomadBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		bin, err := testenv.BuildMediajobs(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		runControlPlane(t, agent, api.VariableItems{"storage_url": "file://" + t.TempDir()}, "", func(task *api.Task) {
			task.Driver = "raw_exec"
			task.Config = map[string]any{"command": bin, "args": task.Config["args"]}
		})
	})
	t.Run("docker", func(t *testing.T) {
		agent, err := testenv.StartNomad(testenv.NomadBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		if !agent.DockerHealthy() {
			testenv.Missing(t, "a Nomad docker driver (start dockerd: deploy/scripts/start-dockerd.sh)")
		}
		image := controlPlaneImage(t)
		m := testenv.StartMinIO(t)
		runControlPlane(t, agent, api.VariableItems{
			"storage_url": m.URL(), "aws_access_key_id": m.AccessKey, "aws_secret_access_key": m.SecretKey, "aws_region": m.Region,
		}, fmt.Sprintf("image = %q\n", image), nil)
	})
}

// runControlPlane puts the variable (items plus what every run needs), runs the
// job with vars, each task changed by retask when set, and checks it works.
func runControlPlane(t *testing.T, agent *testenv.Nomad, items api.VariableItems, vars string, retask func(*api.Task)) {
	_, etcd := testenv.Etcd(t)
	secret := "0123456789abcdef0123456789abcdef"
	items["signing_secret"] = secret
	items["public_url"] = "http://mediajobs.test"
	items["etcd_endpoints"] = strings.Join(etcd.Client.Endpoints(), ", ")
	items["extra"] = "dispatcher {\n  reconcile_every = \"5s\"\n}\n"
	if _, _, err := agent.Client.Variables().Create(&api.Variable{Path: controlPlaneVarPath, Items: items}, nil); err != nil {
		t.Fatal(err)
	}

	jobs := agent.Client.Jobs()
	job := parseControlPlane(t, jobs, vars+"worker_image = \"mediajobs-worker:test\"\ngateway_cpu = 100\ngateway_memory = 128\ndispatcher_cpu = 100\ndispatcher_memory = 128\n")
	for _, g := range job.TaskGroups {
		for _, task := range g.Tasks {
			if retask != nil {
				retask(task)
			}
		}
	}
	if _, _, err := jobs.Register(job, nil); err != nil {
		t.Fatal(err)
	}
	// Stop it and wait for every task to end: a stopped agent leaves its tasks
	// (docker containers included) running. Not purged, so the allocations stay
	// readable until they are terminal.
	defer func() {
		if _, _, err := jobs.Deregister(*job.ID, false, nil); err != nil {
			t.Errorf("stop: %v", err)
			return
		}
		testenv.Eventually(t, time.Duration(*group(t, job, "gateway").Tasks[0].KillTimeout)+30*time.Second, "the control plane to stop", func() bool {
			allocs, _, err := jobs.Allocations(*job.ID, true, nil)
			if err != nil {
				return false
			}
			for _, a := range allocs {
				if a.ClientStatus != "complete" && a.ClientStatus != "failed" && a.ClientStatus != "lost" {
					return false
				}
			}
			return true
		})
	}()

	var last string
	defer func() {
		if !t.Failed() {
			return
		}
		t.Logf("allocations:\n%s", last)
		allocs, _, _ := jobs.Allocations(*job.ID, false, nil)
		for _, stub := range allocs {
			if alloc, _, err := agent.Client.Allocations().Info(stub.ID, nil); err == nil {
				log, _ := catFile(agent.Client, alloc, "alloc/logs/"+stub.TaskGroup+".stderr.0")
				t.Logf("%s %s stderr:\n%s", stub.TaskGroup, short(stub.ID), log[max(0, len(log)-3000):])
			}
		}
	}()
	testenv.Eventually(t, 90*time.Second, "both gateways passing /readyz and a dispatcher registering mediajobs-cpu", func() bool {
		allocs, _, err := jobs.Allocations(*job.ID, false, nil)
		if err != nil {
			return false
		}
		var b strings.Builder
		healthy := 0
		for _, a := range allocs {
			fmt.Fprintf(&b, "  %s %s %s", a.TaskGroup, short(a.ID), a.ClientStatus)
			for task, st := range a.TaskStates {
				if n := len(st.Events); n > 0 {
					fmt.Fprintf(&b, " [%s: %s %s]", task, st.Events[n-1].Type, st.Events[n-1].DisplayMessage)
				}
			}
			if a.TaskGroup == "gateway" && a.ClientStatus == "running" {
				checks, err := agent.Client.Allocations().Checks(a.ID, nil)
				for _, c := range checks {
					fmt.Fprintf(&b, " check %s %s %d %s", c.Check, c.Status, c.StatusCode, c.Output)
					if c.Check == "readyz" && c.Status == "success" && c.StatusCode == 200 {
						healthy++
					}
				}
				if err != nil {
					fmt.Fprintf(&b, " checks: %v", err)
				}
			}
			b.WriteString("\n")
		}
		_, _, err = jobs.Info(mj.PoolJobID("cpu"), nil)
		fmt.Fprintf(&b, "  mediajobs-cpu: %v\n", err)
		last = b.String()
		return healthy == 2 && err == nil
	})

	// What the template rendered is a configuration mediajobs accepts, with the
	// secret kept out of it and the gateway on the port Nomad gave it.
	allocs, _, err := jobs.Allocations(*job.ID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, stub := range allocs {
		if stub.TaskGroup != "gateway" || stub.ClientStatus != "running" {
			continue
		}
		alloc, _, err := agent.Client.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		rendered, err := catFile(agent.Client, alloc, "gateway/local/mediajobs.hcl")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(rendered, secret) {
			t.Fatalf("the signing secret is in the rendered config:\n%s", rendered)
		}
		t.Setenv("MEDIAJOBS_SIGNING_SECRET", secret)
		cfg, err := config.Parse([]byte(rendered), "mediajobs.hcl")
		if err != nil {
			t.Fatalf("rendered config: %v\n%s", err, rendered)
		}
		addr := map[string]string{}
		for _, p := range alloc.AllocatedResources.Shared.Ports {
			addr[p.Label] = fmt.Sprintf("%s:%d", p.HostIP, p.Value)
		}
		if len(addr) != 2 || cfg.Server.Listen != addr["http"] || cfg.Server.MetricsListen != addr["metrics"] {
			t.Fatalf("gateway listens on %s, /metrics on %s; Nomad gave it %+v", cfg.Server.Listen, cfg.Server.MetricsListen, addr)
		}
		if cfg.Etcd.Embedded || len(cfg.Etcd.Endpoints) != len(etcd.Client.Endpoints()) || cfg.Server.SigningSecret != secret ||
			cfg.Storage.URL != items["storage_url"] || cfg.Dispatcher.ReconcileD != 5*time.Second || len(cfg.Pools) != 1 || cfg.Pools[0].Image != "mediajobs-worker:test" {
			t.Fatalf("rendered config:\n%s", rendered)
		}
		break
	}
}

func catFile(c *api.Client, alloc *api.Allocation, path string) (string, error) {
	r, err := c.AllocFS().Cat(alloc, path, nil)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// controlPlaneImage imports what deploy/Dockerfile's final stage holds: a static
// mediajobs, the CA bundle and /tmp, run as 65534 with mediajobs as entrypoint.
func controlPlaneImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mediajobs")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/mediajobs")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	add := func(name, src string, mode int64) {
		hdr := &tar.Header{Name: name, Mode: mode, Typeflag: tar.TypeDir}
		var body []byte
		if src != "" {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			hdr.Typeflag, hdr.Size, body = tar.TypeReg, int64(len(b)), b
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	add("tmp/", "", 0o1777)
	add("etc/", "", 0o755)
	add("etc/ssl/", "", 0o755)
	add("etc/ssl/certs/", "", 0o755)
	add("etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt", 0o644)
	add("usr/", "", 0o755)
	add("usr/local/", "", 0o755)
	add("usr/local/bin/", "", 0o755)
	add("usr/local/bin/mediajobs", bin, 0o755)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	const tag = "mediajobs-controlplane:test"
	imp := exec.Command("docker", "import",
		"--change", "USER 65534:65534",
		"--change", `ENTRYPOINT ["/usr/local/bin/mediajobs"]`,
		"--change", `CMD ["--help"]`,
		"-", tag)
	imp.Stdin = &tarball
	out, err := imp.CombinedOutput()
	if err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	// Whatever the run leaves (a failed stop) goes, and this import's image with it
	// once no container uses it.
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if ids, _ := exec.Command("docker", "ps", "-aq", "--filter", "ancestor="+id).Output(); len(bytes.TrimSpace(ids)) > 0 {
			exec.Command("docker", append([]string{"rm", "-f"}, strings.Fields(string(ids))...)...).Run()
		}
		exec.Command("docker", "rmi", id).Run()
	})
	return tag
}
