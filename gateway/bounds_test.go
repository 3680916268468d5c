package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// cmdOf is a valid command of exactly n stored bytes.
func cmdOf(n int) string {
	head, tail := "-i {{video}} -metadata comment=", " {{out.mp4}}"
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// urlOf is an http URL on host of exactly n stored bytes.
func urlOf(host string, n int) string {
	u := "https://" + host + "/a.mp4?X-Amz-Signature="
	return u + strings.Repeat("0", n-len(u))
}

func inputsOf(n int) map[string]string {
	m := map[string]string{"video": "https://media.example/a.mp4"}
	for i := 1; i < n; i++ {
		m[fmt.Sprintf("in%d", i)] = "https://media.example/a.mp4"
	}
	return m
}

func outputsOf(n int) []string {
	s := []string{"out.mp4"}
	for i := 1; i < n; i++ {
		s = append(s, fmt.Sprintf("o%d.mp4", i))
	}
	return s
}

func metadataOf(keys, bytes int) map[string]string {
	m := map[string]string{}
	for i := 0; i < keys; i++ {
		m[fmt.Sprintf("k%02d", i)] = "" // 3 bytes each
	}
	m["k00"] = strings.Repeat("v", bytes-3*keys)
	return m
}

// TestCreateBounds: each create-time bound holds its maximum, and one byte (or one
// entry) more is a 400 validationError naming the field, with nothing stored.
func TestCreateBounds(t *testing.T) {
	h := newHarness(t)
	srv := h.gw.Config.Server
	srv.MaxBodyBytes = 1 << 20 // the default: every request here fits
	name128 := "n" + strings.Repeat("a", 127)
	out131 := strings.Repeat("s", 124) + "%03d.ts" // a counter is 4 characters
	cases := []struct {
		name      string
		field     string
		max, over map[string]any
	}{
		{"input URL", "input_files.video",
			with("input_files", map[string]string{"video": urlOf("media.example", mj.MaxURLBytes)}),
			with("input_files", map[string]string{"video": urlOf("media.example", mj.MaxURLBytes+1)})},
		// Counted as stored: & takes 6 bytes in etcd.
		{"input URL escaped", "input_files.video",
			with("input_files", map[string]string{"video": urlOf("media.example", mj.MaxURLBytes-6) + "&"}),
			with("input_files", map[string]string{"video": urlOf("media.example", mj.MaxURLBytes-5) + "&"})},
		{"webhook URL", "webhook_url",
			with("webhook_url", urlOf("hooks.example", mj.MaxURLBytes)),
			with("webhook_url", urlOf("hooks.example", mj.MaxURLBytes+1))},
		{"inputs", "input_files", with("input_files", inputsOf(srv.MaxInputs)), with("input_files", inputsOf(srv.MaxInputs+1))},
		{"outputs", "output_files", with("output_files", outputsOf(srv.MaxOutputs)), with("output_files", outputsOf(srv.MaxOutputs+1))},
		{"command text", "ffmpeg_commands",
			with("ffmpeg_commands", []string{cmdOf(srv.MaxCommandBytes)}),
			with("ffmpeg_commands", []string{cmdOf(srv.MaxCommandBytes + 1)})},
		{"command text in all", "ffmpeg_commands",
			with("ffmpeg_commands", []string{cmdOf(srv.MaxCommandBytes - 100), cmdOf(100)}),
			with("ffmpeg_commands", []string{cmdOf(srv.MaxCommandBytes - 100), cmdOf(101)})},
		{"command text, shorthand", "ffmpeg_command",
			map[string]any{"input_files": valid()["input_files"], "output_files": valid()["output_files"], "ffmpeg_command": cmdOf(srv.MaxCommandBytes)},
			map[string]any{"input_files": valid()["input_files"], "output_files": valid()["output_files"], "ffmpeg_command": cmdOf(srv.MaxCommandBytes + 1)}},
		{"commands", "ffmpeg_commands",
			with("ffmpeg_commands", strings.Split(strings.Repeat(cmdOf(50)+"\n", srv.MaxCommands-1)+cmdOf(50), "\n")),
			with("ffmpeg_commands", strings.Split(strings.Repeat(cmdOf(50)+"\n", srv.MaxCommands)+cmdOf(50), "\n"))},
		{"metadata bytes", "metadata", with("metadata", metadataOf(1, mj.MaxMetadataBytes)), with("metadata", metadataOf(1, mj.MaxMetadataBytes+1))},
		{"metadata keys", "metadata", with("metadata", metadataOf(mj.MaxMetadataKeys, 100)), with("metadata", metadataOf(mj.MaxMetadataKeys+1, 100))},
		{"input name", "input_files." + name128 + "x",
			with("input_files", map[string]string{"video": "https://media.example/a.mp4", name128: "https://media.example/b.mp4"}),
			with("input_files", map[string]string{"video": "https://media.example/a.mp4", name128 + "x": "https://media.example/b.mp4"})},
		{"output name", "output_files[1]", with("output_files", []string{"out.mp4", out131}), with("output_files", []string{"out.mp4", "s" + out131})},
	}
	stored := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := h.do("POST", "/api/ffmpeg", "alice", c.max)
			if status != 200 {
				t.Fatalf("at the bound: HTTP %d %v", status, body)
			}
			stored++
			status, body, _ = h.do("POST", "/api/ffmpeg", "alice", c.over)
			if status != 400 || body["errorCode"] != "validationError" {
				t.Fatalf("over the bound: HTTP %d %v", status, body["message"])
			}
			d, _ := body["details"].(map[string]any)
			if d[c.field] == nil || len(d) != 1 {
				t.Fatalf("details %v, want %q only", d, c.field)
			}
			t.Logf("%s: %v", c.field, d[c.field])
			if n := h.total("alice"); n != stored {
				t.Fatalf("%d jobs stored, want %d: a refused request stored one", n, stored)
			}
		})
	}
}

// TestLargestCreateAccepted: with every server setting at its ceiling, a create with
// every field at its maximum (what mediajobs' TestLargestJobFitsEtcd builds) is
// accepted and stored.
func TestLargestCreateAccepted(t *testing.T) {
	h := newHarness(t)
	srv := h.gw.Config.Server
	srv.MaxBodyBytes = 1 << 20
	srv.MaxInputs, srv.MaxOutputs = mj.CeilMaxInputs, mj.CeilMaxOutputs
	srv.MaxCommands, srv.MaxCommandBytes = mj.CeilMaxCommands, mj.CeilMaxCommandBytes
	inputs := map[string]string{}
	for i := 0; i < mj.CeilMaxInputs; i++ {
		n := fmt.Sprintf("in%d_", i)
		inputs[n+strings.Repeat("a", 128-len(n))] = urlOf("media.example", mj.MaxURLBytes)
	}
	inputs["video"] = urlOf("media.example", mj.MaxURLBytes) // replaces one: commands read it
	delete(inputs, "in0_"+strings.Repeat("a", 124))
	outputs := []string{"out.mp4"}
	for i := 1; i < mj.CeilMaxOutputs; i++ {
		n := fmt.Sprintf("o%d_", i)
		outputs = append(outputs, n+strings.Repeat("a", 124-len(n))+"%09d.ts")
	}
	per := mj.CeilMaxCommandBytes / mj.CeilMaxCommands
	cmds := make([]string, mj.CeilMaxCommands)
	for i := range cmds {
		cmds[i] = cmdOf(per)
	}
	cmds[0] = cmdOf(per + mj.CeilMaxCommandBytes%mj.CeilMaxCommands)
	req := map[string]any{"input_files": inputs, "output_files": outputs, "ffmpeg_commands": cmds,
		"webhook_url": urlOf("hooks.example", mj.MaxURLBytes), "metadata": metadataOf(mj.MaxMetadataKeys, mj.MaxMetadataBytes)}
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("HTTP %d %v", status, body["message"])
	}
	j, err := h.store.Job(context.Background(), body["data"].(map[string]any)["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range j.FFmpegCommands {
		total += mj.StoredLen(c)
	}
	if len(j.InputFiles) != mj.CeilMaxInputs || len(j.OutputNames) != mj.CeilMaxOutputs || len(j.FFmpegCommands) != mj.CeilMaxCommands || total != mj.CeilMaxCommandBytes {
		t.Fatalf("stored %d inputs, %d outputs, %d commands of %d bytes", len(j.InputFiles), len(j.OutputNames), len(j.FFmpegCommands), total)
	}
}
