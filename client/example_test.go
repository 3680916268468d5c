package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/mediajobs/mediajobs/client"
)

// Transcode a local file: upload it, run ffmpeg on it, wait, download the result.
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", os.Getenv("MEDIAJOBS_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	in, err := c.UploadFile(ctx, "in.mp4", nil)
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Create(ctx, client.CreateRequest{
		InputFiles:     map[string]string{"video": in.DownloadURL},
		OutputFiles:    []string{"out.mp4"},
		FFmpegCommands: []string{"-i {{video}} -vf scale=1280:-2 {{out.mp4}}"},
	})
	if err != nil {
		log.Fatal(err) // a *client.Error: errorCode, message, details
	}
	job, err = c.Wait(ctx, job.ID, func(j *client.Job) {
		if j.Progress != nil && j.Progress.Percent != nil {
			fmt.Printf("%s %.0f%%\n", j.Status, *j.Progress.Percent)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	if job.Status != "succeeded" {
		log.Fatalf("job %s: %s", job.Status, job.ErrorMessage)
	}
	if _, err := c.DownloadFile(ctx, job.OutputFiles["out.mp4"], "out.mp4", nil); err != nil {
		log.Fatal(err)
	}
}

// Validation errors name the field at fault.
func ExampleError() {
	c, _ := client.New("http://127.0.0.1:8080", "mj_...")
	_, err := c.Create(context.Background(), client.CreateRequest{
		OutputFiles:    []string{"out.mp4"},
		FFmpegCommands: []string{"-i /etc/passwd {{out.mp4}}"},
	})
	if client.IsCode(err, "validationError") {
		e := err.(*client.Error)
		for field, problem := range e.Details {
			fmt.Println(field, problem)
		}
	}
}

// Follow every change of a job as it happens (the events stream; polling where
// there is none).
func ExampleClient_Wait() {
	c, _ := client.New("http://127.0.0.1:8080", "mj_...")
	job, err := c.Wait(context.Background(), "JOB_ID", func(j *client.Job) {
		fmt.Println(j.Status, j.StatusDetail)
	})
	if err == nil {
		fmt.Println("ended:", job.Status)
	}
}

// Run a pipeline: two renditions encoded in parallel (fan-out), then one job
// over both (fan-in), following each step as it goes (docs/pipelines.md).
func ExampleClient_RunPipeline() {
	ctx := context.Background()
	c, _ := client.New("http://127.0.0.1:8080", os.Getenv("MEDIAJOBS_API_KEY"))
	p, err := c.RunPipeline(ctx, client.PipelineRequest{Steps: map[string]client.Step{
		"rung": {
			CreateRequest: client.CreateRequest{
				InputFiles:     map[string]string{"src": "https://media.example/talk.mp4"},
				OutputFiles:    []string{"r${item.height}.mp4"},
				FFmpegCommands: []string{"-i {{src}} -vf scale=-2:${item.height} -c:v libx264 -c:a aac {{r${item.height}.mp4}}"},
			},
			ForEach: []map[string]string{{"height": "360"}, {"height": "720"}},
		},
		"hls": {CreateRequest: client.CreateRequest{
			InputFiles:     map[string]string{"r": "step:rung[*]/r${item.height}.mp4"},
			OutputFiles:    []string{"master.m3u8", "v%v/index.m3u8", "v%v/seg_%03d.ts"},
			FFmpegCommands: []string{"${each:r:-i {{r}}} ${each:r:-map ${index}:v -map ${index}:a} -c copy -f hls -hls_playlist_type vod -var_stream_map \"${each:r:v:${index},a:${index}}\" -master_pl_name master.m3u8 -hls_segment_filename {{v%v/seg_%03d.ts}} {{v%v/index.m3u8}}"},
		}},
	}}, &client.PipelineOptions{OnStep: func(_ *client.Pipeline, s *client.PipelineStep) {
		fmt.Println(s.Name, s.Status)
	}})
	if err != nil {
		log.Fatal(err) // a *client.Error naming steps.<step>.<field>
	}
	if p.Status != "succeeded" {
		log.Fatalf("pipeline %s: %s", p.Status, p.ErrorMessage)
	}
	fmt.Println(p.Steps[1].Jobs[0].OutputFiles["master.m3u8"])
}
