// Package blob stores temporary files and job outputs in a gocloud.dev/blob bucket
// chosen by URL (storage.url): file:///dir, a local directory (the default), or
// s3://bucket?... (AWS S3 or any S3-compatible store: MinIO, Ceph, R2, ...). It also
// signs the URLs through which clients and runners reach files served by the
// gateway (Signer).
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcblob "gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file://
	_ "gocloud.dev/blob/s3blob"   // s3://
	"gocloud.dev/gcerrors"
)

// ErrNotFound is returned for a key that holds nothing.
var ErrNotFound = errors.New("blob not found")

// ErrTooLarge is returned by Put when the body exceeds the limit, and by ReadAll
// for a blob larger than MaxSmall.
var ErrTooLarge = errors.New("blob too large")

// MaxSmall bounds what ReadAll reads: a runner's result.json, a large manifest.
const MaxSmall = 8 << 20

// Bucket is the blob store. Writes are atomic: a reader never sees half a file.
type Bucket struct {
	b *gcblob.Bucket
	// dir is a file bucket's directory (empty for others): the janitor removes the
	// directories its sweeps leave empty.
	dir string
	// scheme is the URL scheme the bucket was opened with.
	scheme string
}

// Open opens the bucket at rawURL: "file:///abs/dir" (created if missing) or a
// gocloud.dev/blob URL such as "s3://bucket?endpoint=...&use_path_style=true".
// Credentials come from the driver's usual environment (AWS_ACCESS_KEY_ID, ...),
// never from the URL.
func Open(ctx context.Context, rawURL string) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("storage url: %w", err)
	}
	if u.Scheme == "file" {
		return NewLocal(u.Path)
	}
	b, err := gcblob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("open storage %s://%s: %w", u.Scheme, u.Host, err)
	}
	return &Bucket{b: b, scheme: u.Scheme}, nil
}

// NewLocal returns a file bucket rooted at dir, creating it. Temporary files are
// written next to their final path and renamed into place; no metadata sidecars;
// every directory is 0750, so the files (fileblob writes them 0666 less the
// umask) are the service's alone.
func NewLocal(dir string) (*Bucket, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: "no_tmp_dir=1&metadata=skip&dir_file_mode=0750"}
	b, err := gcblob.OpenBucket(context.Background(), u.String())
	if err != nil {
		return nil, fmt.Errorf("open storage %s: %w", abs, err)
	}
	return &Bucket{b: b, dir: abs, scheme: "file"}, nil
}

// Close releases the bucket.
func (l *Bucket) Close() error { return l.b.Close() }

// Scheme is the kind of store: "file", "s3", ...
func (l *Bucket) Scheme() string { return l.scheme }

// Presigns reports whether the store signs URLs itself (S3): then clients and
// runners transfer files straight to and from it, and no byte passes through a
// gateway. A file bucket does not: its files are served by the gateway's signed
// /files/ links (Signer).
func (l *Bucket) Presigns() bool { return l.scheme == "s3" }

// SignedURL is a URL of the store itself that allows method (GET or PUT) on key
// for ttl (S3 allows at most 7 days). Any Content-Type may be sent with a PUT. A
// GET answers as the gateway's links do: an attachment, typed by the key's
// extension, whatever type the uploader sent (a file is never served as a page).
func (l *Bucket) SignedURL(ctx context.Context, method, key string, ttl time.Duration) (string, error) {
	if !ValidKey(key) {
		return "", fmt.Errorf("invalid blob key %q", key)
	}
	opts := &gcblob.SignedURLOptions{Method: method, Expiry: min(ttl, 7*24*time.Hour)}
	if method == "GET" {
		opts.BeforeSign = func(as func(any) bool) error {
			var in *s3.GetObjectInput
			if as(&in) {
				in.ResponseContentDisposition = aws.String(Attachment(path.Base(key)))
				in.ResponseContentType = aws.String(ContentType(key))
			}
			return nil
		}
	}
	return l.b.SignedURL(ctx, key, opts)
}

// ContentType is the type a file is served as: by its extension, else binary.
func ContentType(key string) string {
	if ct := mime.TypeByExtension(path.Ext(key)); ct != "" {
		return ct
	}
	return "application/octet-stream"
}

// Attachment is a Content-Disposition for name: quoted and escaped, or RFC 2231
// encoded where it holds non-ASCII or control characters.
func Attachment(name string) string {
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "attachment"
}

// ValidKey reports whether key is a clean relative path ("a/b/c"): no "..", no
// empty or dot segments, no backslashes.
func ValidKey(key string) bool {
	if key == "" || strings.HasPrefix(key, "/") || strings.ContainsAny(key, "\\\x00") {
		return false
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func notFound(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return ErrNotFound
	}
	return err
}

// Put writes r to key, up to max bytes (0: no limit). It returns the bytes written;
// ErrTooLarge, with nothing stored, when r holds more than max.
func (l *Bucket) Put(ctx context.Context, key string, r io.Reader, max int64) (int64, error) {
	if !ValidKey(key) {
		return 0, fmt.Errorf("invalid blob key %q", key)
	}
	// Cancelling the writer's context before Close abandons the write.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := l.b.NewWriter(wctx, key, nil)
	if err != nil {
		return 0, err
	}
	src := r
	if max > 0 {
		src = io.LimitReader(r, max+1)
	}
	n, err := io.Copy(w, src)
	if err == nil && max > 0 && n > max {
		err = ErrTooLarge
	}
	if err != nil {
		cancel()
		w.Close()
		return n, err
	}
	return n, w.Close()
}

// Open returns the blob at key, to read and seek, and its size.
func (l *Bucket) Open(ctx context.Context, key string) (io.ReadSeekCloser, int64, error) {
	if !ValidKey(key) {
		return nil, 0, ErrNotFound
	}
	r, err := l.b.NewReader(ctx, key, nil)
	if err != nil {
		return nil, 0, notFound(err)
	}
	return r, r.Size(), nil
}

// Delete removes the blob at key (ErrNotFound when there is none).
func (l *Bucket) Delete(ctx context.Context, key string) error {
	return notFound(l.b.Delete(ctx, key))
}

// Check writes, reads back and deletes a small probe blob: the store is
// reachable, and these credentials may write to it.
func (l *Bucket) Check(ctx context.Context) error {
	key := fmt.Sprintf("mediajobs-check/%d", time.Now().UnixNano())
	if _, err := l.Put(ctx, key, strings.NewReader("ok"), 0); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if b, err := l.ReadAll(ctx, key); err != nil {
		return fmt.Errorf("read back: %w", err)
	} else if string(b) != "ok" {
		return fmt.Errorf("read back %d bytes other than those written", len(b))
	}
	if err := l.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// ReadAll reads the whole blob at key, a small one: at most MaxSmall bytes, and
// ErrTooLarge past that.
func (l *Bucket) ReadAll(ctx context.Context, key string) ([]byte, error) {
	f, _, err := l.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSmall+1))
	if err == nil && len(b) > MaxSmall {
		return nil, ErrTooLarge
	}
	return b, err
}

// List returns the keys under prefix (a folder: it ends in "/").
func (l *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := l.b.List(&gcblob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return keys, err
		}
		if !obj.IsDir && !strings.HasSuffix(obj.Key, ".tmp") { // a file bucket's write in progress
			keys = append(keys, obj.Key)
		}
	}
}

// Sweep deletes the blobs under prefix last written before cutoff (and, in a file
// bucket, the directories it leaves empty). It goes on past a blob it cannot
// delete, so one cannot stop every later sweep, and returns how many it deleted
// and the first error.
func (l *Bucket) Sweep(ctx context.Context, prefix string, cutoff time.Time) (int, error) {
	if l.dir != "" {
		return l.sweepDir(prefix, cutoff)
	}
	n := 0
	var first error
	it := l.b.List(&gcblob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
		if obj.IsDir || !obj.ModTime.Before(cutoff) {
			continue
		}
		if err := l.b.Delete(ctx, obj.Key); err == nil {
			n++
		} else if gcerrors.Code(err) != gcerrors.NotFound && first == nil {
			first = err
		}
	}
	return n, first
}

// sweepDir is Sweep for a file bucket, in one walk of its directory (fileblob's
// listing walks the tree again for every page).
func (l *Bucket) sweepDir(prefix string, cutoff time.Time) (int, error) {
	root := filepath.Join(l.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
	n := 0
	var first error
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".tmp") {
			return nil // gone meanwhile, or a write in progress
		}
		info, err := d.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			return nil
		}
		if err := os.Remove(p); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
		return nil
	})
	pruneEmptyDirs(root)
	return n, first
}

// pruneEmptyDirs removes the empty directories below root, deepest first.
func pruneEmptyDirs(root string) {
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i]) // fails harmlessly when not empty
	}
}
