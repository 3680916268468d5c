package mediajobs_test

import (
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

func TestShownURLAndRedactURL(t *testing.T) {
	raw := "https://user:hunter2hunter2@bucket.example:9000/b/out%20x.mp4?X-Amz-Credential=AKIAEXAMPLE%2F20260101&X-Amz-Signature=abcdef0123456789#frag"
	if got := mj.ShownURL(raw); got != "https://bucket.example:9000/b/out%20x.mp4" {
		t.Fatalf("ShownURL = %q", got)
	}
	if got := mj.ShownURL("::"); strings.Contains(got, "::") {
		t.Fatalf("ShownURL of junk = %q", got)
	}
	long := "https://h/" + strings.Repeat("p", 1000) + "?sig=x"
	if got := mj.ShownURL(long); len(got) > mj.MaxShownURLBytes {
		t.Fatalf("ShownURL is %d bytes", len(got))
	}
	for _, msg := range []string{
		`PUT ` + raw + ` giving up after 4 attempt(s)`,
		`<SignatureProvided>abcdef0123456789</SignatureProvided><AWSAccessKeyId>AKIAEXAMPLE/20260101</AWSAccessKeyId>`,
		`query X-Amz-Credential=AKIAEXAMPLE%2F20260101&X-Amz-Signature=abcdef0123456789`,
		`dial hunter2hunter2`,
	} {
		got := mj.RedactURL(msg, raw)
		for _, secret := range []string{"abcdef0123456789", "AKIAEXAMPLE", "hunter2hunter2"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) = %q keeps %q", msg, got, secret)
			}
		}
	}
}

func TestViewOfDeliveredOutputs(t *testing.T) {
	j := &mj.Job{ID: "j", Status: mj.StatusSucceeded, Outputs: []mj.Output{
		{Name: "kept.mp4", Key: "k1", Size: 3, Destination: &mj.Delivery{URL: "https://b.example/b/kept.mp4", Status: "uploaded", HTTPStatus: 200, SHA256: "aa", Kept: true}},
		{Name: "sent.mp4", Key: "k2", Size: 4, Destination: &mj.Delivery{URL: "https://b.example/b/sent.mp4", Status: "uploaded", HTTPStatus: 200, SHA256: "bb"}},
		{Name: "plain.mp4", Key: "k3", Size: 5},
	}}
	v := mj.View(j, func(key string) string { return "signed:" + key })
	if v.OutputFiles["kept.mp4"] != "signed:k1" || v.OutputFiles["plain.mp4"] != "signed:k3" {
		t.Fatalf("output_files %v", v.OutputFiles)
	}
	if _, ok := v.OutputFiles["sent.mp4"]; ok {
		t.Fatalf("an output not kept has a link: %v", v.OutputFiles)
	}
	if d := v.Outputs["sent.mp4"].Destination; d == nil || d.URL != "https://b.example/b/sent.mp4" || d.SHA256 != "bb" || v.Outputs["sent.mp4"].SizeBytes != 4 {
		t.Fatalf("outputs %+v", v.Outputs)
	}
	if n := mj.SentOnlyBytes(j.Outputs); n != 4 {
		t.Fatalf("SentOnlyBytes = %d, want sent.mp4's 4", n)
	}
	if v.Outputs["plain.mp4"].Destination != nil {
		t.Fatal("an output without a destination shows one")
	}
}

func TestBoundResultBoundsDeliveries(t *testing.T) {
	var outs []mj.Output
	for i := 0; i < mj.MaxDestinations+5; i++ {
		outs = append(outs, mj.Output{Name: "o", Destination: &mj.Delivery{URL: strings.Repeat("u", 5000), Status: strings.Repeat("s", 100), SHA256: strings.Repeat("h", 100)}})
	}
	b := mj.BoundResult(&mj.Result{Outputs: outs})
	n := 0
	for _, o := range b.Outputs {
		if d := o.Destination; d != nil {
			n++
			if len(d.URL) > mj.MaxShownURLBytes || len(d.SHA256) > 64 || len(d.Status) > 16 {
				t.Fatalf("delivery not bounded: %d %d %d", len(d.URL), len(d.SHA256), len(d.Status))
			}
		}
	}
	if n != mj.MaxDestinations || len(outs[0].Destination.URL) != 5000 {
		t.Fatalf("%d deliveries kept (or the input was changed)", n)
	}
}
