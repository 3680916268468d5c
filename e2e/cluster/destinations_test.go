package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/mediajobs/mediajobs/testenv"
)

// Outputs go straight to a bucket of the user's (a MinIO server of its own,
// whose credentials the service never has) by presigned PUT URLs, on both
// drivers: the object lands with the bytes and sha256 the job reports, the job
// shows where it went without the signature, keep_outputs false leaves no
// service copy, and a destination that refuses the upload fails the job with its
// status and message. No log or Nomad payload holds a signature.
func TestOutputDestinations(t *testing.T) {
	e2e.NeedStack(t)
	user := testenv.StartMinIO(t)    // the user's bucket
	service := testenv.StartMinIO(t) // the service's own storage
	service.SetEnv(t)                // the dispatcher and the gateway use these
	for _, driver := range []string{"raw_exec", "docker"} {
		t.Run(driver, func(t *testing.T) {
			extra, machine := "", "cpu"
			if driver == "docker" {
				needDocker(t)
				extra, machine = dockerPool(""), "docker"
			}
			c := e2e.NewClusterStorage(t, e2e.Agent, service.URL(), extra)
			disp := c.StartDispatcher("d")
			ctx := context.Background()
			presign := func(key string) string {
				t.Helper()
				req, err := s3.NewPresignClient(user.Client()).PresignPutObject(ctx,
					&s3.PutObjectInput{Bucket: aws.String(user.Bucket), Key: aws.String(key)}, s3.WithPresignExpires(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				return req.URL
			}
			cmd := "-f lavfi -i testsrc=size=160x120:rate=10:duration=1 -c:v libx264 -preset ultrafast -pix_fmt yuv420p outputs/out.mp4 -frames:v 1 outputs/thumb.png"
			body := func(dests map[string]string) map[string]any {
				return map[string]any{"output_files": []string{"out.mp4", "thumb.png"}, "ffmpeg_commands": []string{cmd},
					"machine": machine, "output_destinations": dests}
			}
			keptKey, sentKey := driver+"/kept/out.mp4", driver+"/sent/out.mp4"
			keptURL := presign(keptKey)
			kept := c.Create(body(map[string]string{"out.mp4": keptURL}))
			b := body(map[string]string{"out.mp4": presign(sentKey)})
			b["keep_outputs"] = false
			sent := c.Create(b)
			bad := presign(driver + "/bad/out.mp4")
			bad = strings.Replace(bad, "X-Amz-Signature=", "X-Amz-Signature=0", 1)
			refused := c.Create(body(map[string]string{"out.mp4": bad}))

			// The object in the user's bucket: the bytes and the sha256 the job reports.
			landed := func(job map[string]any, key string) []byte {
				t.Helper()
				if job["status"] != "succeeded" {
					t.Fatalf("job %v: %v", job["status"], job["error_message"])
				}
				obj, err := user.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(user.Bucket), Key: aws.String(key)})
				if err != nil {
					t.Fatalf("the output is not in the user's bucket: %v", err)
				}
				defer obj.Body.Close()
				got, _ := io.ReadAll(obj.Body)
				sum := sha256.Sum256(got)
				out := job["outputs"].(map[string]any)["out.mp4"].(map[string]any)
				d, _ := out["destination"].(map[string]any)
				if d == nil || d["url"] != user.Endpoint+"/"+user.Bucket+"/"+key || d["status"] != "uploaded" || d["http_status"] != float64(200) ||
					d["sha256"] != hex.EncodeToString(sum[:]) || out["size_bytes"] != float64(len(got)) || len(got) == 0 {
					t.Fatalf("destination %v, size %v; the bucket holds %d bytes (sha256 %x)", d, out["size_bytes"], len(got), sum)
				}
				if _, ok := job["outputs"].(map[string]any)["thumb.png"].(map[string]any)["destination"]; ok {
					t.Fatalf("an output without a destination shows one: %v", job["outputs"])
				}
				return got
			}
			j := c.WaitStatus(kept, 120*time.Second, "succeeded", "failed")
			got := landed(j, keptKey)
			if d := j["outputs"].(map[string]any)["out.mp4"].(map[string]any)["destination"].(map[string]any); d["kept"] != true {
				t.Fatalf("kept: %v", d)
			}
			// keep_outputs defaults to true: the service's link has the same bytes.
			if own := e2e.Download(t, j["output_files"].(map[string]any)["out.mp4"].(string)); e2e.ReadFile(t, own) != string(got) {
				t.Fatal("the service's copy differs from the destination's")
			}
			j = c.WaitStatus(sent, 120*time.Second, "succeeded", "failed")
			landed(j, sentKey)
			files := j["output_files"].(map[string]any)
			if _, ok := files["out.mp4"]; ok || files["thumb.png"] == nil {
				t.Fatalf("keep_outputs false: output_files %v", files)
			}
			objs, err := service.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &service.Bucket, Prefix: aws.String("jobs/" + sent + "/")})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs.Contents {
				if strings.HasSuffix(*o.Key, "/outputs/out.mp4") {
					t.Fatalf("keep_outputs false, yet the service stored %s", *o.Key)
				}
			}

			// The account's storage holds what the service kept, not what went
			// only to a destination.
			var held float64
			for _, id := range []string{kept, sent} {
				job := c.Job(id)
				for name := range job["output_files"].(map[string]any) {
					held += job["outputs"].(map[string]any)[name].(map[string]any)["size_bytes"].(float64)
				}
			}
			var use any
			testenv.Eventually(t, 30*time.Second, "the kept outputs to count against the account's storage", func() bool {
				use = e2e.Call(t, "GET", c.APIURL+"/api/account", c.Key, nil).Data(t)["usage"].(map[string]any)["storage_bytes"]
				return use == held
			})

			j = c.WaitStatus(refused, 120*time.Second, "succeeded", "failed")
			msg, _ := j["error_message"].(string)
			if j["status"] != "failed" || !strings.Contains(msg, "HTTP 403") || !strings.Contains(msg, "SignatureDoesNotMatch") ||
				!strings.Contains(msg, user.Endpoint+"/"+user.Bucket+"/"+driver+"/bad/out.mp4") {
				t.Fatalf("a refusing destination: %v: %s", j["status"], msg)
			}

			// The service's own credentials cannot read the user's bucket.
			svc := s3.New(s3.Options{BaseEndpoint: aws.String(user.Endpoint), Region: user.Region, UsePathStyle: true,
				Credentials: credentials.NewStaticCredentialsProvider(service.AccessKey, service.SecretKey, "")})
			if _, err := svc.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(user.Bucket), Key: aws.String(keptKey)}); err == nil {
				t.Fatal("the service's credentials read the user's bucket")
			}

			// No signature in any view, log or Nomad job.
			sig := func(u string) string { return u[strings.Index(u, "X-Amz-Signature=")+len("X-Amz-Signature="):] }
			// (The service's own links are signed too: only the user's credential
			// is looked for.)
			secrets := []string{sig(keptURL), sig(bad), user.AccessKey}
			var texts []string
			gather := func() string {
				texts = nil
				for _, id := range []string{kept, sent, refused} {
					texts = append(texts, string(e2e.Call(t, "GET", c.APIURL+"/api/jobs/"+id, c.Key, nil).Body))
					texts = append(texts, nomadTexts(c, c.Stored(id).NomadJobID)...)
				}
				texts = append(texts, string(e2e.Call(t, "GET", c.APIURL+"/api/jobs", c.Key, nil).Body), disp.Log.String())
				return strings.Join(texts, "\n")
			}
			// Nomad's log shipper writes a task's logs behind the task (docker's
			// later still): read until the runner's line is there.
			wantLine := "to its destination " + user.Endpoint + "/" + user.Bucket + "/" + keptKey
			if !strings.Contains(gather(), wantLine) {
				deadline := time.Now().Add(60 * time.Second)
				for !strings.Contains(gather(), wantLine) {
					if time.Now().After(deadline) {
						t.Fatalf("the runner's log does not say where the output went:\n%s", e2e.Tail(strings.Join(texts, "\n"), 3000))
					}
					time.Sleep(500 * time.Millisecond)
				}
			}
			for _, text := range texts {
				for _, s := range secrets {
					if strings.Contains(text, s) {
						t.Fatalf("a signature leaked:\n%s", e2e.Tail(text, 3000))
					}
				}
			}
		})
	}
}

// nomadTexts is what Nomad shows of a dispatched child job: the job itself
// (its meta and payload, decoded) and every task's logs.
func nomadTexts(c *e2e.Cluster, child string) []string {
	c.T.Helper()
	job, _, err := c.Nomad.Client.Jobs().Info(child, nil)
	if err != nil {
		c.T.Fatalf("nomad job %s: %v", child, err)
	}
	raw, _ := json.Marshal(job)
	texts := []string{string(raw), string(job.Payload)}
	allocs, _, err := c.Nomad.Client.Jobs().Allocations(child, true, nil)
	if err != nil || len(allocs) == 0 {
		c.T.Fatalf("allocations of %s: %v", child, err)
	}
	for _, a := range allocs {
		for task := range a.TaskStates {
			for _, kind := range []string{"stdout", "stderr"} {
				u := fmt.Sprintf("%s/v1/client/fs/logs/%s?task=%s&type=%s&plain=true", c.Nomad.Addr, a.ID, task, kind)
				resp, err := http.Get(u)
				if err != nil {
					c.T.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				texts = append(texts, string(b))
			}
			// A docker task's log as docker has it: Nomad's log shipper may
			// miss the end of a short task's (the poststop upload's) output.
			if out, err := exec.Command("docker", "logs", task+"-"+a.ID).CombinedOutput(); err == nil {
				texts = append(texts, string(out))
			}
		}
	}
	return texts
}
