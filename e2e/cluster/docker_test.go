package cluster

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

const workerImage = "mediajobs-worker:local"

// needDocker fails (CI) or skips unless dockerd runs, Nomad's docker driver is up
// and the local worker image is built (make test does all three).
func needDocker(t *testing.T) {
	t.Helper()
	e2e.NeedStack(t)
	if exec.Command("docker", "image", "inspect", workerImage).Run() != nil {
		testenv.Missing(t, "the worker image "+workerImage+" (deploy/worker/build-local.sh)")
	}
	if !e2e.Agent.DockerHealthy() {
		testenv.Missing(t, "Nomad's docker driver (dockerd: deploy/scripts/start-dockerd.sh)")
	}
}

func dockerPool(extra string) string {
	return fmt.Sprintf(`pool "docker" {
  driver = "docker"
  image  = %q
  cpu    = 200
  memory = 256
  disk   = 300
  %s
}`, workerImage, extra)
}

func TestDockerPoolEndToEnd(t *testing.T) {
	needDocker(t)
	c := e2e.NewCluster(t, e2e.Agent, dockerPool(""))
	c.StartDispatcher("d")
	body := c.JobBody("docker-1", "-re -i {{in}} -t 2.5 -vf scale=160:-2 -c:v libx264 -preset ultrafast -c:a aac {{o.mp4}}")
	body["machine"] = "docker"
	id := c.Create(body)
	var sawProgress bool
	testenv.Eventually(t, 120*time.Second, "the docker job to finish", func() bool {
		j := c.Job(id)
		if p, ok := j["progress"].(map[string]any); ok && j["status"] == "running" && p["percent"] != nil {
			sawProgress = true
		}
		return j["status"] == "succeeded" || j["status"] == "failed"
	})
	j := c.Job(id)
	if j["status"] != "succeeded" {
		t.Fatalf("docker job %v: %v", j["status"], j["error_message"])
	}
	meta := j["outputs"].(map[string]any)["o.mp4"].(map[string]any)
	streams := meta["streams"].([]any)
	if len(streams) != 2 || streams[0].(map[string]any)["width"] != float64(160) {
		t.Fatalf("metadata from ffprobe in the container: %v", meta)
	}
	file := e2e.Download(t, j["output_files"].(map[string]any)["o.mp4"].(string))
	if s := e2e.Probe(t, file)["streams"].([]any)[0].(map[string]any); s["codec_name"] != "h264" {
		t.Fatalf("downloaded output %v", s)
	}
	if !sawProgress {
		t.Error("no progress seen while the docker job ran (the progress sidecar posts it)")
	}
	if c.Inputs.Count("docker-1") != 1 {
		t.Fatalf("input fetched %d times", c.Inputs.Count("docker-1"))
	}
}

// TestDockerFFmpegHasNoNetwork: an HLS playlist input whose segment points at a
// loopback URL produces no request there, through the API on a docker pool; and the
// same ffmpeg, told to allow http, reaches the URL from the host but not from the
// worker image without network (what the jobspec's ffmpeg task runs with).
func TestDockerFFmpegHasNoNetwork(t *testing.T) {
	needDocker(t)
	var hits atomic.Int32
	segs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer segs.Close()
	playlist := "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n" + segs.URL + "/seg0.ts\n#EXT-X-ENDLIST\n"
	lists := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(playlist)) }))
	defer lists.Close()

	c := e2e.NewCluster(t, e2e.Agent, dockerPool(""))
	c.StartDispatcher("d")
	id := c.Create(map[string]any{
		"input_files":     map[string]string{"pl": lists.URL + "/list.m3u8"},
		"output_files":    []string{"o.mp4"},
		"ffmpeg_commands": []string{"-f hls -i {{pl}} -c copy {{o.mp4}}"},
		"machine":         "docker",
	})
	j := c.WaitStatus(id, 120*time.Second, "succeeded", "failed")
	if j["status"] != "failed" {
		t.Fatalf("a playlist of unreachable segments: %v", j["status"])
	}
	// ffmpeg's own failure, reported by the upload task on the first attempt: not a
	// retry of a worker that "ended without reporting a result".
	if msg, _ := j["error_message"].(string); !strings.HasPrefix(msg, "command 1 of 1 failed: ffmpeg exited") {
		t.Fatalf("failed job: error_message %q; want ffmpeg's failure, reported by the first attempt", msg)
	}
	if hits.Load() != 0 {
		t.Fatalf("the segment URL got %d requests from a job", hits.Load())
	}

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "list.m3u8"), []byte(playlist), 0o644)
	args := []string{"-hide_banner", "-nostdin", "-protocol_whitelist", "file,http,tcp", "-i", "list.m3u8", "-c", "copy", "-f", "null", "-"}
	host := exec.Command("ffmpeg", args...)
	host.Dir = dir
	host.Run()
	if hits.Load() == 0 {
		t.Fatal("control: ffmpeg on the host did not reach the segment URL; the sandbox check below would prove nothing")
	}
	before := hits.Load()
	out, err := exec.Command("docker", append([]string{"run", "--rm", "--network", "none", "--read-only", "-v", dir + ":/alloc:ro", "-w", "/alloc", workerImage, "ffmpeg"}, args...)...).CombinedOutput()
	if err == nil || hits.Load() != before {
		t.Fatalf("ffmpeg in the worker image without network reached the host: err %v, %d requests\n%s", err, hits.Load()-before, out)
	}
	if !strings.Contains(string(out), "Connection refused") && !strings.Contains(string(out), "Network is unreachable") && !strings.Contains(string(out), "Cannot assign") {
		t.Logf("ffmpeg in the sandbox said:\n%s", out)
	}
}
