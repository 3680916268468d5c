package blob

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// Signer makes and checks signed file URLs: /files/<key>?m=<method>&s=<scope>&e=<unix>&sig=<hmac>.
// The signature covers the method, a key scope and the expiry. A scope ending in "/"
// admits every key under it (a runner uploads outputs whose names it only learns at
// the end, e.g. seg_000.ts, seg_001.ts); any other scope admits exactly that key.
type Signer struct {
	Secret []byte
	Base   string // public base URL, no trailing slash
}

// URL signs access with method (GET or PUT) to scope until exp and returns the URL
// of key, which must lie in scope.
func (s Signer) URL(method, scope, key string, exp time.Time) string {
	return s.URLFor("/files/", method, scope, key, exp)
}

// URLFor is URL for another route of the gateway (e.g. "/progress/").
func (s Signer) URLFor(route, method, scope, key string, exp time.Time) string {
	q := url.Values{}
	q.Set("m", method)
	if scope != key {
		q.Set("s", scope)
	}
	q.Set("e", strconv.FormatInt(exp.Unix(), 10))
	q.Set("sig", s.mac(method, scope, exp.Unix()))
	return s.Base + route + escapePath(key) + "?" + q.Encode()
}

// Errors of Verify. The gateway maps both to 403 forbidden.
var (
	ErrBadSignature = errors.New("the link's signature is invalid")
	ErrExpired      = errors.New("the link has expired")
)

// Verify checks that q signs method on key at now.
func (s Signer) Verify(method, key string, q url.Values, now time.Time) error {
	if q.Get("m") != method {
		return ErrBadSignature
	}
	scope := key
	if q.Has("s") {
		scope = q.Get("s")
		if !strings.HasSuffix(scope, "/") || !strings.HasPrefix(key, scope) {
			return ErrBadSignature
		}
	}
	exp, err := strconv.ParseInt(q.Get("e"), 10, 64)
	if err != nil {
		return ErrBadSignature
	}
	if !hmac.Equal([]byte(q.Get("sig")), []byte(s.mac(method, scope, exp))) {
		return ErrBadSignature
	}
	if now.Unix() > exp {
		return ErrExpired
	}
	return nil
}

func (s Signer) mac(method, scope string, exp int64) string {
	h := hmac.New(sha256.New, s.Secret)
	h.Write([]byte(method + "\n" + scope + "\n" + strconv.FormatInt(exp, 10)))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func escapePath(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Presigner is a store that can sign URLs of its own (see Bucket.Presigns).
type Presigner interface {
	Presigns() bool
	SignedURL(ctx context.Context, method, key string, ttl time.Duration) (string, error)
}

// Links makes the URLs through which clients and runners reach files: the
// store's own signed URLs when it presigns (S3: no byte passes through a
// gateway), else the gateway's signed /files/ links. Store may be nil.
type Links struct {
	Store  any
	Signer Signer
}

// URL allows method on key until exp. scope is what a gateway link admits (a
// prefix ending in "/" admits every key under it); a store's link admits key alone.
func (l Links) URL(ctx context.Context, method, scope, key string, exp time.Time) string {
	if p, ok := l.Store.(Presigner); ok && p.Presigns() {
		u, err := p.SignedURL(ctx, method, key, time.Until(exp))
		if err == nil {
			return u
		}
		// A store that cannot sign now still has its files served by the gateway.
		slog.Warn("storage could not sign a link; handing out a gateway link instead", "key", key, "err", err)
	}
	return l.Signer.URL(method, scope, key, exp)
}

// Download is a client's GET link to key until exp: the gateway's own for a
// playlist among a job's outputs (mj.IsPlaylist), which the gateway serves with
// its references rewritten to the signed links of the files they name (see
// mj.RewritePlaylist), the store's or the gateway's (URL) for any other file.
func (l Links) Download(ctx context.Context, key string, exp time.Time) string {
	if strings.HasPrefix(key, "jobs/") && strings.Contains(key, "/outputs/") && mj.IsPlaylist(key) {
		return l.Signer.URL("GET", key, key, exp)
	}
	return l.URL(ctx, "GET", key, key, exp)
}

// Presigned reports whether Links hands out the store's own URLs.
func (l Links) Presigned() bool {
	p, ok := l.Store.(Presigner)
	return ok && p.Presigns()
}
