package dispatcher

import (
	"context"
	"errors"
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

// The janitor's storage pass: temporary files nobody used yet are counted, or
// deleted when over max_upload_bytes or their account's max_storage_bytes; a
// finished job's outputs count over the limit (never refused) until
// output_retention; expired records give their bytes back and take their files.
func TestJanitorStorage(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		blobs, _ := blob.NewLocal(dir)
		janitorStorage(t, blobs, dir)
	})
	t.Run("s3", func(t *testing.T) { // real MinIO
		m := testenv.StartMinIO(t)
		m.SetEnv(t)
		blobs, err := blob.Open(context.Background(), m.URL())
		if err != nil {
			t.Fatal(err)
		}
		janitorStorage(t, blobs, "")
	})
}

// janitorStorage is TestJanitorStorage on a bucket (dir: a file bucket's
// directory, whose files are made 10 minutes old).
func janitorStorage(t *testing.T, blobs *blob.Bucket, dir string) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	cfg.Server.MaxUploadBytes = 100
	limit := int64(150)
	cfg.Limits.MaxStorageBytes = &limit
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	now := time.Now()
	id := func(n int) string { return "00000000-0000-0000-0000-00000000000" + string(rune('0'+n)) }
	put := func(n, size int, age time.Duration) string {
		key := "tmp/acct/" + id(n)
		if _, err := blobs.Put(ctx, key, strings.NewReader(strings.Repeat("x", size)), 0); err != nil {
			t.Fatal(err)
		}
		if dir != "" {
			at := now.Add(-age)
			os.Chtimes(filepath.Join(dir, key), at, at)
		}
		return key
	}
	held := func() int64 {
		_, u, _, err := s.AccountLimits(ctx, "acct", store.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return u.StorageBytes
	}
	exists := func(key string) bool {
		_, _, err := blobs.Stat(ctx, key)
		return !errors.Is(err, blob.ErrNotFound)
	}
	ok := put(1, 50, 10*time.Minute)
	oversized := put(2, 101, 10*time.Minute)
	overQuota := put(3, 120, 10*time.Minute) // 50 + 120 > 150
	d.Sweep(ctx, now)
	if !exists(ok) || exists(oversized) || exists(overQuota) || held() != 50 {
		t.Fatalf("after the sweep: %v %v %v, held %d", exists(ok), exists(oversized), exists(overQuota), held())
	}
	d.Sweep(ctx, now) // counted once
	if held() != 50 {
		t.Fatalf("swept again: held %d; want 50", held())
	}

	// A succeeded job's outputs count whatever the limit.
	fin := now
	j := &mj.Job{ID: "j1", AccountID: "acct", Status: mj.StatusSucceeded, TotalOutputBytes: 500, FinishedAt: &fin}
	d.settle.countOutputs(ctx, j)
	d.settle.countOutputs(ctx, j)
	if held() != 550 {
		t.Fatalf("with the outputs: held %d; want 550", held())
	}
	// The temporary file expires with tmp_file_ttl, the outputs with output_retention.
	d.Sweep(ctx, now.Add(2*time.Hour))
	if exists(ok) || held() != 500 {
		t.Fatalf("after tmp_file_ttl: file present %v, held %d; want 500", exists(ok), held())
	}
	d.Sweep(ctx, now.Add(cfg.Storage.Retention+time.Minute))
	if held() != 0 {
		t.Fatalf("after output_retention: held %d", held())
	}
}

// A dispatcher that stops between a job's terminal write and the count of its
// outputs leaves them uncounted only until the janitor's next sweep, which
// counts them once.
func TestJanitorCountsOutputsLeftUncounted(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, _ := blob.NewLocal(t.TempDir())
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	now := time.Now().UTC()
	j := &mj.Job{ID: "00000000-0000-4000-8000-00000000a001", AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
		FFmpegCommands: []string{"-version"}, CreatedAt: now, QueuedAt: now}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	// The terminal write alone, as the dispatcher's apply makes it.
	if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
		j.Status, j.FinishedAt, j.TotalOutputBytes = mj.StatusSucceeded, &now, 700
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	held := func() int64 {
		_, u, _, err := s.AccountLimits(ctx, "acct", store.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return u.StorageBytes
	}
	if held() != 0 {
		t.Fatalf("held %d before the sweep", held())
	}
	for range 2 {
		d.Sweep(ctx, now)
		if held() != 700 {
			t.Fatalf("after the sweep: held %d; want 700", held())
		}
	}
	if ids, _ := s.Tallies(ctx, "", 10); len(ids) != 0 {
		t.Fatalf("left to count: %v", ids)
	}
	d.Sweep(ctx, now.Add(cfg.Storage.Retention+time.Minute))
	if held() != 0 {
		t.Fatalf("after output_retention: held %d", held())
	}
}
