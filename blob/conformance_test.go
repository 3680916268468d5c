package blob_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/testenv"
)

// conformance is what the service needs of any bucket, run against every driver
// (file, and S3 on a real MinIO: TestFileBucket, TestS3Bucket).
func conformance(t *testing.T, b *blob.Bucket) {
	ctx := context.Background()
	t.Run("put, read, seek", func(t *testing.T) {
		if n, err := b.Put(ctx, "a/b.txt", strings.NewReader("hello world"), 100); err != nil || n != 11 {
			t.Fatalf("Put = %d, %v", n, err)
		}
		got, err := b.ReadAll(ctx, "a/b.txt")
		if err != nil || string(got) != "hello world" {
			t.Fatalf("ReadAll = %q, %v", got, err)
		}
		f, size, err := b.Open(ctx, "a/b.txt")
		if err != nil || size != 11 {
			t.Fatalf("Open = %d, %v", size, err)
		}
		defer f.Close()
		if _, err := f.Seek(6, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if rest, _ := io.ReadAll(f); string(rest) != "world" {
			t.Fatalf("after Seek: %q", rest)
		}
	})
	t.Run("overwrite", func(t *testing.T) {
		b.Put(ctx, "a/o.txt", strings.NewReader("first"), 0)
		b.Put(ctx, "a/o.txt", strings.NewReader("second"), 0)
		if got, _ := b.ReadAll(ctx, "a/o.txt"); string(got) != "second" {
			t.Fatalf("overwritten blob reads %q", got)
		}
	})
	t.Run("not found", func(t *testing.T) {
		if _, _, err := b.Open(ctx, "nope/x"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Open missing: %v", err)
		}
		if _, err := b.ReadAll(ctx, "nope/x"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("ReadAll missing: %v", err)
		}
		if _, _, err := b.Open(ctx, "a"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("a folder opened as a blob: %v", err)
		}
	})
	t.Run("too large stores nothing", func(t *testing.T) {
		if _, err := b.Put(ctx, "a/big", strings.NewReader("0123456789abc"), 10); !errors.Is(err, blob.ErrTooLarge) {
			t.Fatalf("oversized put: %v", err)
		}
		if _, _, err := b.Open(ctx, "a/big"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("oversized put left a blob: %v", err)
		}
		b.Put(ctx, "a/huge.json", bytes.NewReader(make([]byte, blob.MaxSmall+1)), 0)
		if _, err := b.ReadAll(ctx, "a/huge.json"); !errors.Is(err, blob.ErrTooLarge) {
			t.Fatalf("ReadAll past MaxSmall: %v", err)
		}
	})
	t.Run("bad keys", func(t *testing.T) {
		for _, k := range []string{"../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", ""} {
			if _, err := b.Put(ctx, k, strings.NewReader("x"), 0); err == nil {
				t.Errorf("key %q accepted", k)
			}
		}
	})
	t.Run("list and sweep", func(t *testing.T) {
		for _, k := range []string{"jobs/1/a/result.json", "jobs/1/a/outputs/x.ts", "jobs/2/result.json"} {
			if _, err := b.Put(ctx, k, strings.NewReader(k), 0); err != nil {
				t.Fatal(err)
			}
		}
		keys, err := b.List(ctx, "jobs/1/")
		slices.Sort(keys)
		if err != nil || !slices.Equal(keys, []string{"jobs/1/a/outputs/x.ts", "jobs/1/a/result.json"}) {
			t.Fatalf("List = %v, %v", keys, err)
		}
		if n, err := b.Sweep(ctx, "jobs/", time.Now().Add(-time.Hour)); err != nil || n != 0 {
			t.Fatalf("a sweep of nothing old deleted %d (%v)", n, err)
		}
		if n, err := b.Sweep(ctx, "jobs/1/", time.Now().Add(time.Minute)); err != nil || n != 2 {
			t.Fatalf("Sweep deleted %d (%v), want 2", n, err)
		}
		if keys, _ := b.List(ctx, "jobs/"); !slices.Equal(keys, []string{"jobs/2/result.json"}) {
			t.Fatalf("after the sweep: %v", keys)
		}
	})
}

func TestFileBucket(t *testing.T) {
	dir := t.TempDir()
	b, err := blob.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conformance(t, b)
	for p, want := range map[string]os.FileMode{"a": 0o750, "jobs/2": 0o750} {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
}

func TestS3Bucket(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.SetEnv(t)
	b, err := blob.Open(context.Background(), m.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conformance(t, b)
}

// The store's own links (S3): a presigned GET reads the blob until it expires,
// then MinIO refuses it; a presigned PUT stores one with any Content-Type.
func TestS3SignedURLs(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.SetEnv(t)
	ctx := context.Background()
	b, err := blob.Open(ctx, m.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Presigns() {
		t.Fatal("an s3 bucket does not presign")
	}
	put, err := b.SignedURL(ctx, "PUT", "tmp/a/clip.mp4", time.Hour)
	if err != nil || !strings.HasPrefix(put, m.Endpoint+"/") {
		t.Fatalf("presigned PUT %q (%v)", put, err)
	}
	req, _ := http.NewRequest("PUT", put, strings.NewReader("media"))
	req.Header.Set("Content-Type", "text/html") // what an uploader says is not what is served
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT through the presigned link: %v %v", resp, err)
	}
	get, _ := b.SignedURL(ctx, "GET", "tmp/a/clip.mp4", 2*time.Second)
	var header http.Header
	status := func() int {
		resp, err := http.Get(get)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		header = resp.Header
		return resp.StatusCode
	}
	if s := status(); s != 200 {
		t.Fatalf("fresh presigned GET: %d", s)
	}
	if ct, cd := header.Get("Content-Type"), header.Get("Content-Disposition"); ct != "video/mp4" || cd != `attachment; filename=clip.mp4` {
		t.Fatalf("served as %q, %q: want video/mp4 as an attachment", ct, cd)
	}
	testenv.Eventually(t, 30*time.Second, "MinIO to refuse the expired link", func() bool { return status() == 403 })
	if f, _ := blob.NewLocal(t.TempDir()); f.Presigns() {
		t.Fatal("a file bucket claims to presign")
	}
}
