package testenv_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/mediajobs/mediajobs/testenv"
)

// TestMinIO runs the real server: an object goes in and comes back through the
// S3 API, a presigned GET downloads it from 127.0.0.1 and the same URL with its
// signature altered is refused, and the bucket opens from URL() with gocloud's
// s3blob and the credentials SetEnv puts in the environment.
func TestMinIO(t *testing.T) {
	m := testenv.StartMinIO(t)
	if !strings.HasPrefix(m.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", m.Endpoint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := m.Client()
	body := []byte("hello from mediajobs\n")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(m.Bucket), Key: aws.String("dir/hello.txt"), Body: bytes.NewReader(body),
		ContentType: aws.String("text/plain"),
	}); err != nil {
		t.Fatalf("put: %v\n%s", err, m.Log())
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(m.Bucket), Key: aws.String("dir/hello.txt")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("get: %q, %v; want %q", got, err, body)
	}

	signed, err := s3.NewPresignClient(c).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(m.Bucket), Key: aws.String("dir/hello.txt")},
		s3.WithPresignExpires(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(signed.URL, m.Endpoint+"/"+m.Bucket+"/dir/hello.txt?") {
		t.Fatalf("presigned URL %s is not a path-style URL on %s", signed.URL, m.Endpoint)
	}
	status, got := httpGet(t, signed.URL)
	if status != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("presigned GET: %d %q; want 200 %q", status, got, body)
	}
	u, err := url.Parse(signed.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	sig := []byte(q.Get("X-Amz-Signature"))
	if len(sig) == 0 {
		t.Fatalf("no X-Amz-Signature in %s", signed.URL)
	}
	if sig[0] == '0' {
		sig[0] = '1'
	} else {
		sig[0] = '0'
	}
	q.Set("X-Amz-Signature", string(sig))
	u.RawQuery = q.Encode()
	if status, got := httpGet(t, u.String()); status != http.StatusForbidden {
		t.Fatalf("tampered presigned GET: %d %q; want 403", status, got)
	}

	// The URL the blob layer will open, with credentials from the environment.
	m.SetEnv(t)
	b, err := blob.OpenBucket(ctx, m.URL())
	if err != nil {
		t.Fatalf("blob.OpenBucket(%s): %v", m.URL(), err)
	}
	defer b.Close()
	if got, err := b.ReadAll(ctx, "dir/hello.txt"); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("blob read: %q, %v; want %q", got, err, body)
	}
	if err := b.WriteAll(ctx, "from-blob.bin", bytes.Repeat([]byte{7}, 1<<20), nil); err != nil {
		t.Fatalf("blob write: %v\n%s", err, m.Log())
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(m.Bucket), Key: aws.String("from-blob.bin")})
	if err != nil || aws.ToInt64(head.ContentLength) != 1<<20 {
		t.Fatalf("head of the blob-written object: %v, %v", head, err)
	}
}

func httpGet(t *testing.T, u string) (int, []byte) {
	t.Helper()
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("refusing to GET %s: not loopback", u)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
