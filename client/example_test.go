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
