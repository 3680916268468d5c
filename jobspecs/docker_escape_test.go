package jobspecs

import (
	"bytes"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/testenv"
)

const escapeImage = "mediajobs-worker:local"

// dockerRunArgs is `docker run`'s flags for what the rendered jobspec's task
// asks of the docker driver: its network, root, capabilities, security options,
// process cap, memory and user. A config key it does not know fails the test, so
// the containment tested is always the jobspec's.
func dockerRunArgs(t *testing.T, task *api.Task) []string {
	t.Helper()
	args := []string{"--user", task.User}
	for k, v := range task.Config {
		switch k {
		case "image", "command", "args", "runtime":
		case "network_mode":
			args = append(args, "--network", v.(string))
		case "readonly_rootfs":
			if v == true {
				args = append(args, "--read-only")
			}
		case "cap_drop":
			for _, c := range v.([]any) {
				args = append(args, "--cap-drop", c.(string))
			}
		case "security_opt":
			for _, o := range v.([]any) {
				args = append(args, "--security-opt", o.(string))
			}
		case "pids_limit":
			args = append(args, "--pids-limit", fmt.Sprint(v))
		default:
			t.Fatalf("the runner task's docker config has %s = %v, which this test does not apply", k, v)
		}
	}
	if task.Resources != nil && task.Resources.MemoryMB != nil {
		args = append(args, "--memory", fmt.Sprintf("%dm", *task.Resources.MemoryMB))
	}
	return args
}

// renderedRunner parses the docker pool's rendered jobspec on a real agent and
// returns its ffmpeg task.
func renderedRunner(t *testing.T) *api.Task {
	t.Helper()
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	r, err := Render(testPools()["docker"], "/usr/local/bin/mediajobs")
	if err != nil {
		t.Fatal(err)
	}
	job, err := agent.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.HCL, Variables: r.Variables, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	for _, task := range job.TaskGroups[0].Tasks {
		if task.Name == "runner" {
			return task
		}
	}
	t.Fatal("the docker jobspec has no runner task")
	return nil
}

// TestDockerSandboxHoldsWithTheCheckerBypassed is runner/escape_test.go's for
// docker pools: the hostile commands run with ffmpeg itself (no checker) in the
// worker image, with what the rendered jobspec gives the runner task. Each gets
// out when ffmpeg runs on the host (the control); in the container none reaches
// a host file, a host process's environment, the host's loopback or a path
// outside the job, and the root filesystem stays unchanged.
func TestDockerSandboxHoldsWithTheCheckerBypassed(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "docker")
	if exec.Command("docker", "image", "inspect", escapeImage).Run() != nil {
		testenv.Missing(t, "the worker image "+escapeImage+" (deploy/worker/build-local.sh)")
	}
	flags := dockerRunArgs(t, renderedRunner(t))
	if !strings.Contains(strings.Join(flags, " "), "--network none") {
		t.Fatalf("the runner task has network: %v", flags)
	}

	// What an escape could reach on the host.
	host := t.TempDir()
	secret := fmt.Sprintf("MJCANARY-%d-host-secret", time.Now().UnixNano())
	canary := filepath.Join(host, "canary.txt")
	os.WriteFile(canary, bytes.Repeat([]byte(secret+"\n"), 100), 0o644)
	wav := filepath.Join(host, "canary.wav")
	if out, err := exec.Command(ff, "-v", "error", "-f", "u8", "-ar", "8000", "-ac", "1", "-i", canary, "-c:a", "pcm_u8", wav).CombinedOutput(); err != nil {
		t.Fatalf("make canary wav: %v %s", err, out)
	}
	holder := exec.Command("sleep", "300")
	holder.Env = []string{"MEDIAJOBS_ESCAPE_CANARY=" + secret}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var hits atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	url := "http://" + ln.Addr().String() + "/x"
	playlist := "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n" + wav + "\n#EXT-X-ENDLIST\n"

	type attack struct {
		name    string
		inputs  map[string]string
		command func(outside string) string
	}
	attacks := []attack{
		{"HLS playlist naming a host file", map[string]string{"pl.m3u8": playlist},
			func(string) string {
				return "-allowed_extensions ALL -allowed_segment_extensions ALL -extension_picky 0 -i inputs/pl.m3u8 -c copy -f u8 outputs/out.raw"
			}},
		{"absolute input path", nil, func(string) string { return "-i " + wav + " -c copy -f u8 outputs/out.raw" }},
		{"a host process's environment through /proc", nil, func(string) string {
			return fmt.Sprintf("-f u8 -ar 8000 -ac 1 -i /proc/%d/environ -c copy -f u8 outputs/out.raw", holder.Process.Pid)
		}},
		{"concat list naming a host file with -safe 0", map[string]string{"list.txt": "ffconcat version 1.0\nfile '" + wav + "'\n"},
			func(string) string { return "-f concat -safe 0 -i inputs/list.txt -c copy -f u8 outputs/out.raw" }},
		{"movie source reading a host file", nil, func(string) string { return "-f lavfi -i amovie=" + wav + " -c:a pcm_u8 -f u8 outputs/out.raw" }},
		{"-fpre options writing a segment list outside the job", map[string]string{"p.txt": "segment_list=OUTSIDE/list.csv\n"},
			func(string) string {
				return "-f lavfi -i testsrc=d=1:size=64x64 -fpre inputs/p.txt -f segment outputs/seg%d.ts"
			}},
		{"-fpre options posting a segment list to a local service", map[string]string{"p.txt": "segment_list=" + url + "\n"},
			func(string) string {
				return "-f lavfi -i testsrc=d=1:size=64x64 -fpre inputs/p.txt -f segment outputs/seg%d.ts"
			}},
		{"HLS key info file naming a URL", map[string]string{"keyinfo": "k.key\n" + url + "\n"},
			func(string) string {
				return "-f lavfi -i testsrc=d=1:size=64x64 -hls_key_info_file inputs/keyinfo -f hls outputs/pl.m3u8"
			}},
		{"HLS segments written outside the job", nil, func(outside string) string {
			return "-f lavfi -i testsrc=d=1:size=64x64 -f hls -hls_segment_filename " + outside + "/s%d.ts outputs/pl.m3u8"
		}},
		{"absolute output path", nil, func(outside string) string { return "-f lavfi -i testsrc=d=0.2:size=64x64 " + outside + "/x.mp4" }},
		{"URL input", nil, func(string) string { return "-i " + url + " -f null -" }},
		{"writing to the root filesystem", nil, func(string) string { return "-f lavfi -i testsrc=d=0.2:size=64x64 /tmp/x.mp4" }},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			for _, contained := range []bool{false, true} {
				work, outside := t.TempDir(), t.TempDir()
				for _, d := range []string{work, outside, filepath.Join(work, "inputs"), filepath.Join(work, "outputs")} {
					os.MkdirAll(d, 0o777)
					os.Chmod(d, 0o777) // the container's user, 65534, writes here as on Nomad
				}
				for name, content := range a.inputs {
					os.WriteFile(filepath.Join(work, "inputs", name), []byte(strings.ReplaceAll(content, "OUTSIDE", outside)), 0o644)
				}
				before := hits.Load()
				argv := append([]string{"-hide_banner", "-nostdin", "-y"}, strings.Fields(a.command(outside))...)
				var changed string
				if contained {
					name := fmt.Sprintf("mj-escape-%d", time.Now().UnixNano())
					run := append(append([]string{"run", "--name", name}, flags...), "-v", work+":/alloc/work", "-w", "/alloc/work", escapeImage, "ffmpeg")
					out, _ := exec.Command("docker", append(run, argv...)...).CombinedOutput()
					diff, err := exec.Command("docker", "diff", name).CombinedOutput()
					exec.Command("docker", "rm", "-f", name).Run()
					if err != nil {
						t.Fatalf("docker diff: %v %s (run: %s)", err, diff, out)
					}
					for _, line := range strings.Split(strings.TrimSpace(string(diff)), "\n") {
						if line != "A /alloc" && line != "A /alloc/work" { // the bind's mount point
							changed += line + " "
						}
					}
					changed = strings.TrimSpace(changed)
				} else {
					cmd := exec.Command(ff, argv...)
					cmd.Dir = work
					cmd.Run()
				}
				var why []string
				filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
					if err == nil && d.Type().IsRegular() {
						if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
							why = append(why, "the secret is in the job's file "+strings.TrimPrefix(p, work))
						}
					}
					return nil
				})
				if ents, _ := os.ReadDir(outside); len(ents) > 0 {
					why = append(why, fmt.Sprintf("%d file(s) written outside the job", len(ents)))
				}
				if n := hits.Load() - before; n > 0 {
					why = append(why, fmt.Sprintf("%d connection(s) to a loopback listener", n))
				}
				if !contained {
					if _, err := os.Stat("/tmp/x.mp4"); err == nil && a.name == "writing to the root filesystem" {
						os.Remove("/tmp/x.mp4")
						why = append(why, "wrote /tmp/x.mp4")
					}
					if len(why) == 0 {
						t.Fatal("control: on the host the attack did not get out; it proves nothing")
					}
					continue
				}
				if changed != "" {
					why = append(why, "the container's root filesystem changed: "+changed)
				}
				if len(why) > 0 {
					t.Fatalf("escaped the container: %s", strings.Join(why, "; "))
				}
			}
		})
	}
}

// TestDockerSandboxCapsThreads: ffmpeg asking for thousands of filter threads
// (the checker bypassed) in the container the rendered jobspec describes is held
// at its pids_limit: the kernel refuses the threads past it.
func TestDockerSandboxCapsThreads(t *testing.T) {
	testenv.Binary(t, "docker")
	if exec.Command("docker", "image", "inspect", escapeImage).Run() != nil {
		testenv.Missing(t, "the worker image "+escapeImage+" (deploy/worker/build-local.sh)")
	}
	task := renderedRunner(t)
	limit, ok := task.Config["pids_limit"]
	if !ok {
		t.Fatal("the runner task sets no pids_limit")
	}
	name := fmt.Sprintf("mj-threads-%d", time.Now().UnixNano())
	run := append(append([]string{"run", "-d", "--name", name}, dockerRunArgs(t, task)...), escapeImage,
		"ffmpeg", "-nostdin", "-re", "-f", "lavfi", "-i", "testsrc=d=20:size=320x240", "-filter_threads", "3000", "-vf", "scale=160:120", "-f", "null", "-")
	if out, err := exec.Command("docker", run...).CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", name).Run()
	// The container's pids cgroup, from its first process.
	var dir string
	testenv.Eventually(t, 30*time.Second, "the container's pids cgroup", func() bool {
		out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", name).Output()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if pid == 0 || err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && (parts[1] == "pids" || parts[0] == "0" && parts[1] == "") {
				for _, base := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
					if _, err := os.Stat(filepath.Join(base, parts[2], "pids.max")); err == nil {
						dir = filepath.Join(base, parts[2])
					}
				}
			}
		}
		return dir != ""
	})
	if b, _ := os.ReadFile(filepath.Join(dir, "pids.max")); strings.TrimSpace(string(b)) != fmt.Sprint(limit) {
		t.Fatalf("the container's pids.max is %q, the jobspec's pids_limit %v", b, limit)
	}
	testenv.Eventually(t, 30*time.Second, "the kernel to refuse threads past pids_limit", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "pids.events"))
		n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "max")))
		return n > 0
	})
}
