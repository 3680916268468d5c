package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/store"
)

// Temporary files count against their account's max_storage_bytes and are
// bounded by max_upload_bytes (docs/limits.md). A client that declares the size
// when it asks for the link ({"size": N}) is counted at once, and its upload
// must be exactly N bytes: S3 checks the signed Content-Length, the gateway's own
// upload route the record. One that does not (VGF clients) is counted when a job
// first names the file as an input, or at the janitor's sweep: an oversized or
// over-quota file is deleted then and refused.

// tmpBlobs is what bounding temporary files needs of the blob store
// (*blob.Bucket has it).
type tmpBlobs interface {
	SignedPut(ctx context.Context, key string, size int64, ttl time.Duration) (string, error)
	Stat(ctx context.Context, key string) (int64, time.Time, error)
	Delete(ctx context.Context, key string) error
	PresignedKey(ctx context.Context, rawURL string) (string, bool)
}

// storageLimiter is what the store keeps of storage held (*store.Store has it).
type storageLimiter interface {
	CheckStorage(ctx context.Context, account string, more int64, defaults store.Limits) error
	HeldObject(ctx context.Context, account, obj string) (store.Held, bool, error)
	CountStorage(ctx context.Context, account, obj string, h store.Held, defaults store.Limits, within bool) (store.Held, bool, error)
	ClaimTmpFile(ctx context.Context, account, id, key string, size int64, expires time.Time, maxUpload int64, defaults store.Limits) error
}

// tmpRequest is the optional body of POST /api/tmp-file.
type tmpRequest struct {
	Size *int64 `json:"size"`
}

// declaredSize reads the size a tmp-file request declares; -1 when none (no
// body, or no size in it).
func (g *Gateway) declaredSize(c *fiber.Ctx) (int64, error) {
	// Clients that predate sizes send no body, or one that is not ours (a stray
	// chunked body, a form): ignored as it always was. A JSON object is read.
	body, err := g.jsonBody(c)
	var e *mj.Error
	if errors.As(err, &e) && e.Code == mj.EPayloadTooLarge {
		return -1, nil
	}
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
		return -1, err
	}
	var req tmpRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, &mj.Error{Code: mj.EValidation, Message: `the body, when there is one, must be {"size": <bytes>}`, Details: map[string]string{"size": err.Error()}}
	}
	switch max := g.Config.Server.MaxUploadBytes; {
	case req.Size == nil:
		return -1, nil
	case *req.Size < 1:
		return 0, &mj.Error{Code: mj.EValidation, Message: "size must be 1 or more bytes", Details: map[string]string{"size": "must be 1 or more"}}
	case *req.Size > max:
		return 0, &mj.Error{Code: mj.EPayloadTooLarge, Message: "size is over max_upload_bytes (" + strconv.FormatInt(max, 10) + ")",
			Details: map[string]string{"limit": "max_upload_bytes", "value": strconv.FormatInt(max, 10), "use": strconv.FormatInt(*req.Size, 10)}}
	}
	return *req.Size, nil
}

// reserveTmp counts a declared temporary file against its account's storage,
// or for an undeclared one checks the account has not reached it.
func (g *Gateway) reserveTmp(ctx context.Context, acct, id, key string, size int64, exp time.Time) error {
	sl := g.Store
	if size < 0 {
		return sl.CheckStorage(ctx, acct, 0, g.limitDefaults())
	}
	_, _, err := sl.CountStorage(ctx, acct, store.TmpObject(id), store.Held{Bytes: size, Expires: exp, Blob: key}, g.limitDefaults(), true)
	return err
}

// tmpUploadURL is the upload link of a temporary file: with a declared size on
// a presigning store, one that signs its Content-Length.
func (g *Gateway) tmpUploadURL(ctx context.Context, key string, size int64, exp time.Time) string {
	if size > 0 && g.links().Presigned() {
		u, err := g.Blobs.SignedPut(ctx, key, size, time.Until(exp))
		if err == nil {
			return u
		}
		// The gateway's own link checks the declared size itself (upload).
		g.Log.Warn("storage could not sign a sized upload link; handing out a gateway link instead", "key", key, "err", err)
		return g.Signer.URL("PUT", key, key, exp)
	}
	return g.links().URL(ctx, "PUT", key, key, exp)
}

// uploadMax is how many bytes a PUT to key may carry: a declared temporary file
// exactly its size (refused otherwise), anything else max_upload_bytes.
func (g *Gateway) uploadMax(c *fiber.Ctx, key string) (int64, error) {
	max := g.Config.Server.MaxUploadBytes
	acct, id, ok := mj.ParseTmpKey(key)
	if !ok {
		return max, nil
	}
	h, ok, err := g.Store.HeldObject(c.UserContext(), acct, store.TmpObject(id))
	if err != nil || !ok {
		return max, err
	}
	if cl := int64(c.Request().Header.ContentLength()); cl != h.Bytes {
		return 0, &mj.Error{Code: mj.EValidation, Message: "this temporary file is counted as " + strconv.FormatInt(h.Bytes, 10) + " bytes: send exactly that many, with Content-Length",
			Details: map[string]string{"Content-Length": "must be " + strconv.FormatInt(h.Bytes, 10)}}
	}
	return h.Bytes, nil
}

// tmpKey returns the key of the temporary file a URL of this service names (a
// download_url, the gateway's or the store's own), and whether it names one.
func (g *Gateway) tmpKey(ctx context.Context, u string) (string, bool) {
	key := ""
	if g.ownFile(u) {
		pu, err := url.Parse(u)
		base, err2 := url.Parse(g.Signer.Base)
		if err != nil || err2 != nil {
			return "", false
		}
		key = strings.TrimPrefix(pu.Path, base.Path+"/files/")
	} else {
		var ok bool
		if key, ok = g.Blobs.PresignedKey(ctx, u); !ok {
			return "", false
		}
	}
	_, _, ok := mj.ParseTmpKey(key)
	return key, ok
}

// claimInputs counts the temporary files a new job names as inputs, at their
// first use, against their accounts' storage. A file over max_upload_bytes or
// over its account's max_storage_bytes is deleted and refused, naming the input.
func (g *Gateway) claimInputs(ctx context.Context, j *mj.Job) error {
	tb, sl := g.Blobs, g.Store
	for _, name := range slices.Sorted(maps.Keys(j.InputFiles)) {
		key, ok := g.tmpKey(ctx, j.InputFiles[name])
		if !ok || mj.IsJobRef(j.InputFiles[name]) {
			continue
		}
		field := "input_files." + name
		size, mod, err := tb.Stat(ctx, key)
		if errors.Is(err, blob.ErrNotFound) {
			return &mj.Error{Code: mj.EValidation, Message: field + ": the temporary file was never uploaded, or has expired",
				Details: map[string]string{field: "no such temporary file"}}
		}
		if err != nil {
			return err
		}
		acct, id, _ := mj.ParseTmpKey(key)
		err = sl.ClaimTmpFile(ctx, acct, id, key, size, mod.Add(g.Config.Server.TmpFileTTLD), g.Config.Server.MaxUploadBytes, g.limitDefaults())
		if !store.Deletable(err) {
			return err
		}
		if derr := tb.Delete(ctx, key); derr != nil && !errors.Is(derr, blob.ErrNotFound) {
			g.Log.Warn("could not delete a refused temporary file", "key", key, "err", derr)
		}
		var e *mj.Error
		errors.As(err, &e)
		details := maps.Clone(e.Details)
		if details == nil {
			details = map[string]string{}
		}
		details["field"] = field
		return &mj.Error{Code: e.Code, Message: field + ": " + e.Message + "; the file was deleted", Details: details}
	}
	return nil
}
