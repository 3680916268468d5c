package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
)

// fileKey returns the blob key of a /files/<key> request and checks its signature.
func (g *Gateway) fileKey(c *fiber.Ctx, method string) (string, error) {
	raw := strings.TrimPrefix(c.Path(), "/files/")
	key, err := url.PathUnescape(raw)
	if err != nil || !blob.ValidKey(key) {
		return "", mj.Errorf(mj.ENotFound, "no such file")
	}
	q := url.Values{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { q.Add(string(k), string(v)) })
	if err := g.Signer.Verify(method, key, q, g.Now()); err != nil {
		return "", mj.Errorf(mj.EForbidden, "%v", err)
	}
	return key, nil
}

func (g *Gateway) download(c *fiber.Ctx) error {
	key, err := g.fileKey(c, "GET")
	if err != nil {
		return err
	}
	if done, err := g.servePlaylist(c, key); done {
		return err // a job's playlist, rewritten (playlists.go)
	}
	// The body is streamed after this handler returns, when its context has
	// ended: the reader gets one of its own (closing the stream releases it).
	f, size, err := g.Blobs.Open(context.WithoutCancel(c.UserContext()), key)
	if errors.Is(err, blob.ErrNotFound) {
		return mj.Errorf(mj.ENotFound, "the file no longer exists")
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, blob.ContentType(key))
	// Files are user content (an output may be HTML or SVG): never render or sniff
	// them as pages of the API's origin.
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentDisposition, blob.Attachment(path.Base(key)))
	c.Set(fiber.HeaderAcceptRanges, "bytes")
	var mod time.Time
	etag := ""
	if m, ok := f.(interface{ ModTime() time.Time }); ok && !m.ModTime().IsZero() {
		// A file may be uploaded again under its key (a temporary file): its time
		// and size tell the versions apart, for If-Range.
		mod = m.ModTime()
		etag = fmt.Sprintf(`"%x-%x"`, mod.UnixNano(), size)
		c.Set(fiber.HeaderLastModified, mod.UTC().Format(http.TimeFormat))
		c.Set(fiber.HeaderETag, etag)
	}
	rng := c.Get(fiber.HeaderRange)
	if rng == "" || !ifRange(c.Get(fiber.HeaderIfRange), etag, mod) {
		return c.SendStream(f, int(size)) // fasthttp closes f when done
	}
	start, n, ok := byteRange(rng, size)
	switch {
	case !ok: // not one range of bytes (or several): the whole file, as RFC 9110 allows
		return c.SendStream(f, int(size))
	case n == 0:
		f.Close()
		c.Set(fiber.HeaderContentRange, fmt.Sprintf("bytes */%d", size))
		return c.Status(fiber.StatusRequestedRangeNotSatisfiable).Send(nil)
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		f.Close()
		return err
	}
	c.Set(fiber.HeaderContentRange, fmt.Sprintf("bytes %d-%d/%d", start, start+n-1, size))
	c.Status(fiber.StatusPartialContent)
	return c.SendStream(struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, n), f}, int(n))
}

// ifRange tells whether a Range request applies: without If-Range always; with it
// only when it names this version of the file (its strong ETag or its exact
// Last-Modified time), else the whole file is sent.
func ifRange(v, etag string, mod time.Time) bool {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return true
	case strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/"):
		return etag != "" && v == etag
	}
	t, err := http.ParseTime(v)
	return err == nil && !mod.IsZero() && t.Unix() == mod.Unix()
}

// byteRange reads a Range header of one byte range ("bytes=a-b", "bytes=a-",
// "bytes=-n") against a file of size bytes: where it starts and how many bytes it
// covers (0 when none of it is in the file: 416). ok is false for anything else,
// several ranges included, which is answered with the whole file.
func byteRange(h string, size int64) (start, n int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	num := func(s string) (int64, bool) {
		if s == "" || strings.TrimLeft(s, "0123456789") != "" {
			return 0, false
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return math.MaxInt64, true // past any file: clamped below (RFC 9110)
		}
		return v, err == nil
	}
	if first == "" { // the last n bytes
		suffix, ok := num(last)
		if !ok {
			return 0, 0, false
		}
		suffix = min(suffix, size)
		return size - suffix, suffix, true
	}
	a, ok := num(first)
	if !ok {
		return 0, 0, false
	}
	b := size - 1
	if last != "" {
		if b, ok = num(last); !ok || b < a {
			return 0, 0, false
		}
		b = min(b, size-1)
	}
	if a >= size {
		return 0, 0, true
	}
	return a, b - a + 1, true
}

// upload streams a PUT body into the blob store: temporary files from clients, and
// outputs and results from runners. Any Content-Type; 200 on success.
func (g *Gateway) upload(c *fiber.Ctx) error {
	key, err := g.fileKey(c, "PUT")
	if err != nil {
		return err
	}
	if err := g.attemptOpen(c.UserContext(), key); err != nil {
		return err
	}
	max, err := g.uploadMax(c, key) // a declared temporary file: its size (storagequota.go)
	if err != nil {
		return err
	}
	if cl := c.Request().Header.ContentLength(); cl > 0 && int64(cl) > max {
		return mj.Errorf(mj.EPayloadTooLarge, "the file is over max_upload_bytes (%d)", max)
	}
	body := requestBody(c)
	if body == nil {
		body = strings.NewReader(string(c.Body()))
	}
	n, err := g.Blobs.Put(c.UserContext(), key, body, max)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"size": n}})
}

// links makes file URLs: the store's own when it presigns, else this gateway's.
func (g *Gateway) links() blob.Links { return blob.Links{Store: g.Blobs, Signer: g.Signer} }

// createTmpFile hands out a signed upload URL and the matching download URL for a
// temporary file, usable as a job input. An optional body {"size": N} declares
// its size: counted at once, and the upload must be exactly that
// (storagequota.go).
func (g *Gateway) createTmpFile(c *fiber.Ctx) error {
	size, err := g.declaredSize(c)
	if err != nil {
		return err
	}
	id := uuid.NewString()
	key := mj.TmpKey(account(c), id)
	exp := g.Now().Add(g.Config.Server.TmpFileTTLD)
	if err := g.reserveTmp(c.UserContext(), account(c), id, key, size, exp); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": fiber.Map{
		"upload_url":   g.tmpUploadURL(c.UserContext(), key, size, exp),
		"download_url": g.links().URL(c.UserContext(), "GET", key, key, exp),
		"expires_at":   exp.UTC().Format("2006-01-02T15:04:05Z07:00"),
	}})
}

// attemptOpen refuses a runner's upload (jobs/<id>/<attempt>/...) once the job is
// finished or has moved on to another attempt: a worker the dispatcher gave up on
// (stopped, timed out, or a copy Nomad started of a lost allocation) cannot add
// files to a job after the fact. The cache may lag behind a new attempt, so a
// refusal is confirmed from etcd first.
func (g *Gateway) attemptOpen(ctx context.Context, key string) error {
	rest, ok := strings.CutPrefix(key, "jobs/")
	if !ok {
		return nil
	}
	parts := strings.SplitN(rest, "/", 3)
	attempt, err := strconv.Atoi(parts[min(1, len(parts)-1)])
	if len(parts) < 3 || err != nil {
		return nil
	}
	open := func(j *mj.Job) bool { return !j.Status.Terminal() && max(j.Attempt, 1) == attempt }
	j, err := g.job(ctx, parts[0])
	if err == nil && !open(j) {
		j, err = g.Store.Job(ctx, parts[0])
	}
	switch {
	case mj.ErrorCode(err) == mj.ENotFound:
		return mj.Errorf(mj.EConflict, "job %s no longer exists; the upload was refused", parts[0])
	case err != nil:
		return err
	case j.Status.Terminal():
		return mj.Errorf(mj.EConflict, "job %s is already %s; the upload was refused", j.ID, j.Status)
	case !open(j):
		return mj.Errorf(mj.EConflict, "attempt %d of job %s is over (the job is on attempt %d); the upload was refused", attempt, j.ID, max(j.Attempt, 1))
	}
	return nil
}
