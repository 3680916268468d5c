package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

func TestJanitor(t *testing.T) {
	s, _ := testenv.Etcd(t)
	dir := t.TempDir()
	blobs, _ := blob.NewLocal(dir)
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	now := time.Now()
	put := func(key string, age time.Duration) {
		if _, err := blobs.Put(ctx, key, strings.NewReader("x"), 0); err != nil {
			t.Fatal(err)
		}
		old := now.Add(-age)
		os.Chtimes(filepath.Join(dir, key), old, old)
	}
	put("tmp/acct/old", 2*time.Hour)                // past tmp_file_ttl (1h)
	put("tmp/acct/new", 10*time.Minute)             // still valid
	put("jobs/a/1/outputs/out.mp4", 8*24*time.Hour) // past output_retention (7 days)
	put("jobs/b/1/outputs/out.mp4", 24*time.Hour)
	old := &mj.Job{ID: "j-old", AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu", CreatedAt: now.Add(-25 * time.Hour)}
	fresh := &mj.Job{ID: "j-new", AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu", CreatedAt: now}
	s.CreateJobOnce(ctx, old, &store.Idempotency{Key: "k-old", Fingerprint: "f"})
	s.CreateJobOnce(ctx, fresh, &store.Idempotency{Key: "k-new", Fingerprint: "f"})

	d.Sweep(ctx, now)

	for key, want := range map[string]bool{"tmp/acct/old": false, "tmp/acct/new": true, "jobs/a/1/outputs/out.mp4": false, "jobs/b/1/outputs/out.mp4": true} {
		r, _, err := blobs.Open(ctx, key)
		if err == nil {
			r.Close()
		}
		if (err == nil) != want {
			t.Errorf("%s present=%v, want %v", key, err == nil, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "jobs/a")); !os.IsNotExist(err) {
		t.Errorf("emptied directory jobs/a left behind")
	}
	// The old key is forgotten (a new request with it makes a new job); the new one is not.
	again, err := s.CreateJobOnce(ctx, &mj.Job{ID: "j-3", AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu", CreatedAt: now}, &store.Idempotency{Key: "k-old", Fingerprint: "f"})
	if err != nil || again.ID != "j-3" {
		t.Fatalf("old idempotency key still remembered: %v %v", again, err)
	}
	same, err := s.CreateJobOnce(ctx, &mj.Job{ID: "j-4", AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu", CreatedAt: now}, &store.Idempotency{Key: "k-new", Fingerprint: "f"})
	if err != nil || same.ID != "j-new" {
		t.Fatalf("recent idempotency key forgotten: %v %v", same, err)
	}
}
