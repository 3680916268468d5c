package gateway

import (
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/config"
)

// A GPU pool whose GPUs have no NVENC (here H100s, by their model constraint)
// refuses NVENC encoders at create with a 400 naming a pool that can encode, and
// stores nothing; decoding on its GPUs and CUDA filters are accepted.
func TestCreateNVENCOnPoolWithoutEncoder(t *testing.T) {
	h := newHarness(t)
	cfg := h.gw.Config
	cfg.Pools = append(cfg.Pools, &config.Pool{Name: "h100", GPU: &config.GPU{Model: "H100"}})
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if cfg.Pool("h100").CanEncode() || !cfg.Pool("nvidia").CanEncode() {
		t.Fatalf("pools: h100 %+v, nvidia %+v", cfg.Pool("h100").GPU, cfg.Pool("nvidia").GPU)
	}

	for _, cmd := range []string{
		"-i {{video}} -c:v h264_nvenc {{out.mp4}}",
		"-hwaccel cuda -hwaccel_output_format cuda -i {{video}} -c:v hevc_nvenc {{out.mp4}}",
		"-i {{video}} -vcodec nvenc_h264 {{out.mp4}}",
	} {
		req := with("ffmpeg_commands", []string{cmd})
		req["machine"] = "h100"
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
		if status != 400 || body["errorCode"] != "validationError" {
			t.Fatalf("%s: HTTP %d %v, want a 400 validationError", cmd, status, body)
		}
		d, _ := body["details"].(map[string]any)
		msg, _ := d["ffmpeg_commands[0]"].(string)
		for _, part := range []string{`machine "h100" cannot encode with NVENC`, `"H100"`, `use "machine": "nvidia"`, "libx264", "-hwaccel cuda"} {
			if !strings.Contains(msg, part) || !strings.Contains(body["message"].(string), part) {
				t.Errorf("%s: message %q, details %q lack %q", cmd, body["message"], msg, part)
			}
		}
	}
	if n := h.total("alice"); n != 0 {
		t.Fatalf("%d jobs stored by refused creates", n)
	}

	for i, cmd := range []string{
		"-hwaccel cuda -i {{video}} -c:v libx264 {{out.mp4}}",
		"-c:v h264_cuvid -i {{video}} -c:v libx264 {{out.mp4}}",
		"-hwaccel cuda -hwaccel_output_format cuda -i {{video}} -vf scale_cuda=640:360,hwdownload,format=nv12 -c:v libx264 {{out.mp4}}",
	} {
		req := with("ffmpeg_commands", []string{cmd})
		req["machine"] = "h100"
		if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req); status != 200 {
			t.Fatalf("%s: HTTP %d %v, want it accepted", cmd, status, body)
		}
		if n := h.total("alice"); n != i+1 {
			t.Fatalf("%d jobs stored, want %d", n, i+1)
		}
	}
	// NVENC on the pool that encodes is still accepted.
	req := with("ffmpeg_commands", []string{"-i {{video}} -c:v h264_nvenc {{out.mp4}}"})
	req["machine"] = "nvidia"
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req); status != 200 {
		t.Fatalf("nvenc on nvidia: HTTP %d %v", status, body)
	}

	// With no pool that encodes, the message says so.
	cfg.Pools = []*config.Pool{{Name: "cpu"}, {Name: "h100", GPU: &config.GPU{Model: "H100"}}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	req = with("ffmpeg_commands", []string{"-i {{video}} -c:v av1_nvenc {{out.mp4}}"})
	req["machine"] = "h100"
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if msg, _ := body["message"].(string); status != 400 || !strings.Contains(msg, "no machine on this server has GPUs with NVENC") {
		t.Fatalf("HTTP %d %v, want a 400 saying no machine encodes", status, body)
	}
}
