package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TmpFile is a temporary file: PUT its bytes to UploadURL, then use DownloadURL as
// a job input. Both expire at ExpiresAt.
type TmpFile struct {
	UploadURL   string    `json:"upload_url"`
	DownloadURL string    `json:"download_url"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// Progress is told how many bytes of total have gone (total -1: unknown).
type Progress func(done, total int64)

// CreateTmpFile asks for a temporary file's upload and download links.
func (c *Client) CreateTmpFile(ctx context.Context) (*TmpFile, error) {
	var f TmpFile
	if err := c.do(ctx, http.MethodPost, "/api/tmp-file", nil, nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Upload sends size bytes of r as a new temporary file and returns it; its
// DownloadURL is a job input. progress, when not nil, follows the bytes. The PUT
// goes to the signed (or presigned) upload link, without the API key, and is not
// retried (r is read once).
func (c *Client) Upload(ctx context.Context, r io.Reader, size int64, progress Progress) (*TmpFile, error) {
	f, err := c.CreateTmpFile(ctx)
	if err != nil {
		return nil, err
	}
	body := io.Reader(r)
	switch {
	case size == 0:
		body = http.NoBody // an empty file: Content-Length 0, not an empty chunked body
	case progress != nil:
		body = &counter{r: r, total: size, progress: progress}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, f.UploadURL, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	hc := *c.http.HTTPClient
	hc.Timeout = 0 // large files: ctx bounds it
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, linkError(resp, "uploadFailed")
	}
	io.Copy(io.Discard, resp.Body)
	return f, nil
}

// UploadFile uploads a local file as a temporary file.
func (c *Client) UploadFile(ctx context.Context, path string, progress Progress) (*TmpFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return c.Upload(ctx, fh, fi.Size(), progress)
}

// Download writes the file at a signed URL (a job's output_files entry, a
// temporary file's DownloadURL) to w and returns its size.
func (c *Client) Download(ctx context.Context, url string, w io.Writer, progress Progress) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	hc := *c.http.HTTPClient
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, linkError(resp, "downloadFailed")
	}
	var r io.Reader = resp.Body
	if progress != nil {
		r = &counter{r: resp.Body, total: resp.ContentLength, progress: progress}
	}
	return io.Copy(w, r)
}

// DownloadFile downloads a signed URL into a local file. The file is replaced only
// once the whole download has arrived: a failed one leaves what was there.
func (c *Client) DownloadFile(ctx context.Context, url, path string, progress Progress) (int64, error) {
	fh, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return 0, err
	}
	n, err := c.Download(ctx, url, fh, progress)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		os.Chmod(fh.Name(), 0o644)
		err = os.Rename(fh.Name(), path)
	}
	if err != nil {
		os.Remove(fh.Name())
	}
	return n, err
}

// counter reports the bytes read through it.
type counter struct {
	r        io.Reader
	done     int64
	total    int64
	progress Progress
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.done += int64(n)
		c.progress(c.done, c.total)
	}
	return n, err
}

// linkError is a signed link's refusal: the API's error when the gateway served
// the link, else the store's answer (S3's XML) as the message.
func linkError(resp *http.Response, code string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	e := &Error{StatusCode: resp.StatusCode}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		e.Code, e.Message = code, strings.TrimSpace(string(b))
	}
	return e
}
