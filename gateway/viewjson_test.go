package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
)

// sendView writes the view field by field: byte for byte what encoding/json
// (fiber's c.JSON) writes for {"data": view}, for jobs in every status, with
// every field set and unset, and strings that need escaping.
func TestJobViewJSON(t *testing.T) {
	sign := func(key string) string { return "https://gw.example/files/" + key + "?sig=a&b<c>" }
	for _, j := range viewTestJobs() {
		v := mj.View(j, sign)
		want, err := json.Marshal(fiber.Map{"data": v})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendJobData(nil, &v)
		if !ok || string(got) != string(want) {
			t.Errorf("job %s (%s):\ngot  %s\nwant %s", j.ID, j.Status, got, want)
		}
	}
	// A time encoding/json refuses is left to it (its error, as before).
	v := mj.View(&mj.Job{ID: "y", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, sign)
	if _, ok := appendJobData(nil, &v); ok {
		t.Error("a year past 9999 was written")
	}
}

// viewTestJobs are jobs in every status, with every field set and unset, and
// strings that need escaping.
func viewTestJobs() []*mj.Job {
	at := time.Date(2026, 11, 28, 8, 27, 19, 123456789, time.UTC)
	local := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 5*3600+30*60))
	pct, eta, dur := 42.5, 3.0, 12.25
	bare := &mj.Job{ID: "j0", Status: mj.StatusQueued, CreatedAt: at}
	full := func(st mj.Status) *mj.Job {
		return &mj.Job{
			ID: "0b0f3d1e-6f0e-4c5e-9f54-3a2b1c0d9e8f", AccountID: "acct", Status: st, Machine: "cpu",
			ErrorMessage: "ffmpeg exited 1: \"bad\" <input> & \u2028 \x01 \xff tail",
			CreatedAt:    at, QueuedAt: at.Add(time.Millisecond), UpdatedAt: local, StartedAt: &at, FinishedAt: &local,
			InputFiles:     map[string]string{"video": "https://media.example.com/a.mp4", "b": "https://x.example/é", "a": "s3://k?x=1&y=2"},
			Metadata:       map[string]string{"z": "1", "ünï": "<b>", "": "empty"},
			FFmpegCommands: []string{"-i {{video}} -c:v libx264 {{out.mp4}}", "-f lavfi -i \"color\""},
			WebhookURL:     "https://hooks.example/x?a=1&b=2",
			TimeoutSeconds: 60, StatusDetail: "waiting: 1 of your jobs is ahead in pool cpu",
			Progress:        &mj.Progress{Percent: &pct, CommandIndex: 1, CommandCount: 2, FPS: 29.97, Speed: 1.5, ETASeconds: &eta, UpdatedAt: at},
			TotalInputBytes: 1234, TotalOutputBytes: 5678,
			LogCommands: []int{1, 2}, LogsPrefix: "logs/j",
			Outputs: []mj.Output{
				{Name: "out.mp4", Key: "outputs/j/out.mp4", Size: 5000, Probe: &mj.Probe{DurationSeconds: &dur, Format: "mov,mp4", Streams: []mj.Stream{{Type: "video", Codec: "h264"}}}},
				{Name: "a.png", Key: "outputs/j/a.png", Size: 678, Destination: &mj.Delivery{URL: "https://b.example/a.png", Status: "uploaded", HTTPStatus: 200, Kept: true}},
			},
			Analysis: []mj.Analysis{{Command: 1, Filter: "loudnorm", Instance: "Parsed_loudnorm_0", Data: json.RawMessage(`{"input_i" : "-23.0"}`)}},
			Webhook:  &mj.WebhookState{Status: mj.WebhookPending, DeliveryID: "d1", LastError: "<timeout>", DeliveredAt: &at},
			Usage:    &mj.Usage{WallSeconds: 1.5, CPUSeconds: 0.25, InputBytes: 10},
			Worker:   &mj.Worker{Path: mj.WorkerWarm, NomadJobID: "mediajobs-warm-cpu", AllocationID: "a1"},
		}
	}
	many := &mj.Job{ID: "m", Status: mj.StatusRunning, CreatedAt: at, Metadata: map[string]string{}}
	for i := range 20 {
		many.Metadata[strings.Repeat("k", 20-i)] = strings.Repeat("v", i)
	}
	item := 2
	step := &mj.Job{ID: "p", Status: mj.StatusQueued, CreatedAt: at, Pipeline: &mj.PipelineRef{ID: "pl", Step: "encode", Item: &item}}
	parent := &mj.Job{ID: "c", Status: mj.StatusSucceeded, CreatedAt: at, Parallel: &mj.Parallel{Mode: mj.ParallelChunked, ChunkSeconds: 2, MaxWorkers: 4,
		PipelineID: "pl", Verification: json.RawMessage(`{"pass":true}`)}}
	single := &mj.Job{ID: "s", Status: mj.StatusQueued, CreatedAt: at, Parallel: &mj.Parallel{Mode: mj.ParallelSingle, Reason: "fade <in>"}}
	jobs := []*mj.Job{bare, many, step, parent, single}
	for _, st := range []mj.Status{mj.StatusQueued, mj.StatusRunning, mj.StatusSucceeded, mj.StatusFailed, mj.StatusCancelled} {
		jobs = append(jobs, full(st))
		j := full(st)
		j.StartedAt, j.FinishedAt, j.Progress, j.Webhook, j.Usage, j.Worker, j.WebhookURL = nil, nil, nil, nil, nil, nil, ""
		j.InputFiles, j.Metadata, j.FFmpegCommands, j.Outputs, j.Analysis = nil, nil, nil, nil, nil
		jobs = append(jobs, j)
	}
	return jobs
}

// The view's fields, in order, are the ones appendJobData writes: a field
// added to mj.JobView must be added there too.
func TestJobViewFields(t *testing.T) {
	want := []string{"id", "status", "output_files", "error_message", "created_at", "queued_at", "updated_at",
		"started_at", "finished_at", "machine", "input_files", "ffmpeg_commands", "webhook_url", "timeout_seconds",
		"metadata", "progress", "outputs", "status_detail", "webhook", "total_input_bytes", "total_output_bytes",
		"logs", "analysis", "usage", "worker", "pipeline", "parallel"}
	var got []string
	vt := reflect.TypeOf(mj.JobView{})
	for i := range vt.NumField() {
		got = append(got, strings.Split(vt.Field(i).Tag.Get("json"), ",")[0])
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("mj.JobView's fields are\n%v\nappendJobData writes\n%v\nupdate appendJobData (gateway/viewjson.go) and this list", got, want)
	}
}
