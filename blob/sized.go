package blob

import (
	"context"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcblob "gocloud.dev/blob"
)

// SignedPut is a presigned PUT of exactly size bytes to key for ttl: the
// Content-Length is signed, so the store itself refuses a body of another size
// (a declared temporary file, docs/limits.md). size must be at least 1.
func (l *Bucket) SignedPut(ctx context.Context, key string, size int64, ttl time.Duration) (string, error) {
	if !ValidKey(key) {
		return "", ErrNotFound
	}
	return l.b.SignedURL(ctx, key, &gcblob.SignedURLOptions{Method: "PUT", Expiry: min(ttl, 7*24*time.Hour),
		BeforeSign: func(as func(any) bool) error {
			var in *s3.PutObjectInput
			if as(&in) {
				in.ContentLength = aws.Int64(size)
			}
			return nil
		}})
}

// Stat returns the size and time of last write of the blob at key.
func (l *Bucket) Stat(ctx context.Context, key string) (int64, time.Time, error) {
	if !ValidKey(key) {
		return 0, time.Time{}, ErrNotFound
	}
	a, err := l.b.Attributes(ctx, key)
	if err != nil {
		return 0, time.Time{}, notFound(err)
	}
	return a.Size, a.ModTime, nil
}

// Each calls fn with every blob under prefix: its key, size and time of last
// write; an error of fn stops it.
func (l *Bucket) Each(ctx context.Context, prefix string, fn func(key string, size int64, mod time.Time) error) error {
	it := l.b.List(&gcblob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if obj.IsDir || strings.HasSuffix(obj.Key, ".tmp") { // a file bucket's write in progress
			continue
		}
		if err := fn(obj.Key, obj.Size, obj.ModTime); err != nil {
			return err
		}
	}
}

// PresignedKey returns the key a URL presigned by this store (SignedURL,
// SignedPut) names, and whether it is one: the same scheme, host and bucket
// path as the store's own links. The signature is not checked (the store
// does that when the URL is used).
func (l *Bucket) PresignedKey(ctx context.Context, rawURL string) (string, bool) {
	if !l.Presigns() {
		return "", false
	}
	const probe = "tmp/probe"
	ref, err := l.b.SignedURL(ctx, probe, &gcblob.SignedURLOptions{Method: "GET", Expiry: time.Minute})
	if err != nil {
		return "", false
	}
	r, err1 := url.Parse(ref)
	u, err2 := url.Parse(rawURL)
	if err1 != nil || err2 != nil || r.Scheme != u.Scheme || r.Host != u.Host {
		return "", false
	}
	base, ok := strings.CutSuffix(r.EscapedPath(), probe)
	if !ok {
		return "", false
	}
	key, ok := strings.CutPrefix(u.EscapedPath(), base)
	if !ok {
		return "", false
	}
	key, err = url.PathUnescape(key)
	if err != nil || !ValidKey(key) {
		return "", false
	}
	return key, true
}
