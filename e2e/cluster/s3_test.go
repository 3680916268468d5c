package cluster

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus"
)

// Files in a real S3 bucket (MinIO), two gateways that share nothing but etcd and
// the bucket: a temporary file uploaded through the first is the input of a job
// created through the second, its HLS outputs download through links from either,
// and every byte lives in the bucket, none on a gateway's disk. Every link handed
// out is MinIO's own presigned URL, but for the playlist's: a gateway serves a
// playlist with its segments' presigned URLs in place of their relative names
// (gateway/playlists.go), so only the playlists pass through a gateway.
func TestS3TwoGatewaysShareOnlyTheBucket(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.SetEnv(t) // the dispatcher process and the in-process gateways read these
	filesBefore := filesRequests(t)
	c := e2e.NewClusterStorage(t, e2e.Agent, m.URL(), "")
	c.StartDispatcher("d")

	// The second gateway: its own address and (empty) directory, same etcd and bucket.
	cfg2 := *c.Config
	srv2 := *cfg2.Server
	cfg2.Server = &srv2
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api2 := "http://" + ln.Addr().String()
	srv2.PublicURL = api2
	blobs2, err := blob.Open(context.Background(), m.URL())
	if err != nil {
		t.Fatal(err)
	}
	g2 := &gateway.Gateway{Config: &cfg2, Store: c.Store, Blobs: blobs2, Signer: blob.Signer{Secret: []byte(c.Secret), Base: api2},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	app2 := g2.App()
	go app2.Listener(ln)
	t.Cleanup(func() { app2.Shutdown() })

	// A temporary file through gateway 1.
	tmp := e2e.Call(t, "POST", c.APIURL+"/api/tmp-file", c.Key, nil).Data(t)
	for _, k := range []string{"upload_url", "download_url"} {
		if !strings.HasPrefix(tmp[k].(string), m.Endpoint+"/") {
			t.Fatalf("tmp-file %s is not MinIO's: %s", k, tmp[k])
		}
	}
	clip := e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body
	if r := e2e.Call(t, "PUT", tmp["upload_url"].(string), "", clip, "Content-Type", "video/mp4"); r.Status != 200 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	// The job through gateway 2.
	r := e2e.Call(t, "POST", api2+"/api/ffmpeg", c.Key, map[string]any{
		"input_files":     map[string]string{"clip": tmp["download_url"].(string)},
		"output_files":    []string{"index.m3u8", "seg_%03d.ts"},
		"ffmpeg_commands": []string{"-i {{clip}} -c:v libx264 -preset ultrafast -g 10 -f hls -hls_time 1 -hls_segment_filename outputs/seg_%03d.ts {{index.m3u8}}"},
	})
	if r.Status != 200 {
		t.Fatalf("create through gateway 2: %d %s", r.Status, r.Body)
	}
	id := r.Data(t)["id"].(string)
	job := c.WaitStatus(id, 120*time.Second, "succeeded", "failed")
	if job["status"] != "succeeded" {
		t.Fatalf("job %v: %v", job["status"], job["error_message"])
	}
	for _, base := range []string{c.APIURL, api2} {
		j := e2e.Call(t, "GET", base+"/api/jobs/"+id, c.Key, nil).Data(t)
		outs := j["output_files"].(map[string]any)
		if len(outs) < 3 {
			t.Fatalf("outputs via %s: %v", base, outs)
		}
		for name, u := range outs {
			if name == "index.m3u8" {
				if !strings.HasPrefix(u.(string), base+"/files/") {
					t.Fatalf("the playlist via %s is not the gateway's link: %s", base, u)
				}
				continue
			}
			if !strings.HasPrefix(u.(string), m.Endpoint+"/") {
				t.Fatalf("%s via %s is not a MinIO link: %s", name, base, u)
			}
		}
		// MinIO itself refuses a tampered link.
		bad := strings.Replace(outs["seg_000.ts"].(string), "X-Amz-Signature=", "X-Amz-Signature=0", 1)
		if r := e2e.Call(t, "GET", bad, "", nil); r.Status != 403 {
			t.Fatalf("tampered MinIO link: HTTP %d", r.Status)
		}
		// The playlist names each segment by its presigned MinIO link, which plays.
		pl := string(e2e.Call(t, "GET", outs["index.m3u8"].(string), "", nil).Body)
		seg0 := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m.Endpoint) + `/\S*/outputs/seg_000\.ts\?\S*X-Amz-Signature=\S+$`).FindString(pl)
		if seg0 == "" {
			t.Fatalf("playlist via %s:\n%s", base, pl)
		}
		if s := e2e.Probe(t, e2e.Download(t, seg0))["streams"].([]any)[0].(map[string]any); s["codec_name"] != "h264" {
			t.Fatalf("segment by the playlist's link via %s: %v", base, s)
		}
		if s := e2e.Probe(t, e2e.Download(t, outs["seg_000.ts"].(string)))["streams"].([]any)[0].(map[string]any); s["codec_name"] != "h264" {
			t.Fatalf("segment via %s: %v", base, s)
		}
	}
	if n := filesRequests(t) - filesBefore; n != 2 {
		t.Fatalf("%v requests went through a gateway's /files/ route; with S3 only the 2 playlist downloads should", n)
	}
	// The bytes are in the bucket, not on any disk of the service.
	objs, err := m.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &m.Bucket, Prefix: strPtr("jobs/" + id + "/")})
	if err != nil || len(objs.Contents) < 4 { // result.json, playlist, segments
		t.Fatalf("objects of the job in the bucket: %v (%v)", objs, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(c.CfgFile), "blobs")); !os.IsNotExist(err) {
		t.Fatalf("a blobs directory was written next to the config: %v", err)
	}
}

func strPtr(s string) *string { return &s }

// filesRequests counts the requests the gateways of this process answered on
// /files/* (the route that streams bytes).
func filesRequests(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "mediajobs_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == "/files/*" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// `mediajobs config check -connect` proves the bucket is reachable and writable,
// and names what is wrong when it is not.
func TestConfigCheckConnectsToTheBucket(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.SetEnv(t)
	cfg := filepath.Join(t.TempDir(), "s3.hcl")
	os.WriteFile(cfg, []byte("server {\n  signing_secret = \"0123456789abcdef\"\n}\nstorage {\n  url = \""+m.URL()+"\"\n}\n"), 0o600)
	var out strings.Builder
	if code := e2e.Run(context.Background(), []string{"config", "check", "-connect", cfg}, &out, &out); code != 0 || !strings.Contains(out.String(), "reachable and writable") {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+m.SecretKey)
	out.Reset()
	if code := e2e.Run(context.Background(), []string{"config", "check", "-connect", cfg}, &out, &out); code == 0 || !strings.Contains(out.String(), "storage:") || strings.Contains(out.String(), m.SecretKey) {
		t.Fatalf("wrong credentials: exit %d\n%s", code, out.String())
	}
}

// A manifest over Nomad's 16 KiB payload limit waits in the bucket behind a
// presigned link, under a name an output link does not reveal.
func TestS3LargeManifest(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.SetEnv(t)
	c := e2e.NewClusterStorage(t, e2e.Agent, m.URL(), "")
	c.StartDispatcher("d")
	filters := strings.TrimSuffix(strings.Repeat("null,", 4000), ",") // 20 KB of command
	id := c.Create(c.JobBody("big", "-i {{in}} -t 1 -vf "+filters+" -c:v libx264 -preset ultrafast {{o.mp4}}"))
	job := c.WaitStatus(id, 120*time.Second, "succeeded", "failed")
	if job["status"] != "succeeded" {
		t.Fatalf("job %v: %v", job["status"], job["error_message"])
	}
	objs, err := m.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &m.Bucket, Prefix: strPtr("jobs/" + id + "/1/manifest")})
	if err != nil || len(objs.Contents) != 1 || *objs.Contents[0].Key == "jobs/"+id+"/1/manifest.json" {
		t.Fatalf("the large manifest in the bucket: %+v (%v)", objs.Contents, err)
	}
}
