package gateway

import (
	"context"
	"io"
	"mime"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// A multipart Content-Type must not make fasthttp parse the body (into temp files,
// past BodyLimit, before the signature is checked): signed uploads stream as is.
func TestUploadMultipartStreams(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
	d := body["data"].(map[string]any)
	up, _ := url.Parse(d["upload_url"].(string))
	down, _ := url.Parse(d["download_url"].(string))
	// The preamble would be lost if fasthttp parsed the form and re-encoded it.
	form := "preamble\r\n--a\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\nhello\r\n--a--\r\n"
	ct := "multipart/form-data; boundary=a"
	if status, body, _ := h.do("PUT", up.RequestURI(), "", form, "Content-Type", ct); status != 200 {
		t.Fatalf("multipart upload: %d %v", status, body)
	}
	resp, _ := h.app.Test(httptest.NewRequest("GET", down.RequestURI(), nil))
	got, _ := io.ReadAll(resp.Body)
	if string(got) != form {
		t.Fatalf("stored %q, want the raw body", got)
	}
	// Unsigned: refused by the signature check, not parsed first (a malformed form
	// would otherwise fail in fasthttp), and an oversized one is not read either.
	if status, body, _ := h.do("PUT", "/files/tmp/x", "", "--a\r\nbroken", "Content-Type", ct); status != 403 {
		t.Fatalf("unsigned multipart PUT: %d %v", status, body)
	}
	big := "--a\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\n" + strings.Repeat("x", 5000) + "\r\n--a--\r\n"
	if status, body, _ := h.do("PUT", up.RequestURI(), "", big, "Content-Type", ct); status != 413 {
		t.Fatalf("oversized multipart upload: %d %v", status, body)
	}
}

// Outputs are downloaded as attachments, never rendered as the API origin's HTML.
func TestDownloadIsAttachment(t *testing.T) {
	h := newHarness(t)
	for _, name := range []string{"page.html", `a"b;c.svg`, "x\r\nSet: y.html", "é.svg"} {
		key := "outputs/j1/" + name
		if _, err := h.gw.Blobs.Put(context.Background(), key, strings.NewReader("<script>"), 100); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(h.gw.Signer.URL("GET", key, key, time.Now().Add(time.Hour)))
		resp, err := h.app.Test(httptest.NewRequest("GET", u.RequestURI(), nil))
		if err != nil {
			t.Fatal(err)
		}
		cd := resp.Header.Get("Content-Disposition")
		disp, params, err := mime.ParseMediaType(cd)
		if resp.StatusCode != 200 || resp.Header.Get("X-Content-Type-Options") != "nosniff" || err != nil || disp != "attachment" || params["filename"] != name {
			t.Errorf("%q: HTTP %d, headers %v (Content-Disposition parses as %q %q %v)", name, resp.StatusCode, resp.Header, disp, params, err)
		}
	}
}

func TestListOffsetCap(t *testing.T) {
	h := newHarness(t)
	if status, _, _ := h.do("GET", "/api/jobs?offset=10000", "alice", nil); status != 200 {
		t.Fatalf("offset=10000: %d", status)
	}
	status, body, _ := h.do("GET", "/api/jobs?offset=10001", "alice", nil)
	if msg, _ := body["message"].(string); status != 400 || body["errorCode"] != "validationError" || !strings.Contains(msg, "status") {
		t.Fatalf("offset=10001: %d %v", status, body)
	}
}

// revokingStore revokes the key right after the gateway read it from etcd, and
// delivers the revocation as the watch would, before the gateway caches the key.
type revokingStore struct {
	*store.Store
	after func(hash string)
}

func (s *revokingStore) APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error) {
	k, err := s.Store.APIKeyByHash(ctx, hash)
	if err == nil && s.after != nil {
		s.after(hash)
		s.after = nil
	}
	return k, err
}

func TestRevokedDuringLookupNotCached(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	acct, _ := h.store.APIKeyByHash(ctx, mj.HashAPIKey(h.keys["alice"]))
	h.store.AddAPIKey(ctx, acct.AccountID, "spare", mj.NewAPIKeySecret()) // the last key cannot be revoked
	rs := &revokingStore{Store: h.store}
	rs.after = func(hash string) {
		if err := h.store.RevokeAPIKey(ctx, acct.AccountID, acct.ID); err != nil {
			t.Error(err)
		}
		h.gw.keys.drop(hash) // the watch's event
	}
	h.gw.Store = rs
	h.do("GET", "/api/jobs", "alice", nil) // read before the revocation: may pass
	if status, body, _ := h.do("GET", "/api/jobs", "alice", nil); status != 401 {
		t.Fatalf("revoked key still accepted from the cache: %d %v", status, body)
	}
}

// racingStore makes two requests miss the key cache together, then holds the
// second one's answer back (a sleep: no happens-before edge for -race) so that it
// caches the key while the first request reads it.
type racingStore struct {
	*store.Store
	calls  atomic.Int32
	second chan struct{}
}

func (s *racingStore) APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error) {
	k, err := s.Store.APIKeyByHash(ctx, hash)
	if s.calls.Add(1) == 1 {
		<-s.second
	} else {
		close(s.second)
		time.Sleep(200 * time.Millisecond)
	}
	return k, err
}

// Run with -race: the cache's entries are written under its lock and must be read so.
// Requests share one lookup of a key (authKey's singleflight), so the two misses
// are lookups made directly, as the dashboard's session check makes its own.
func TestKeyCacheConcurrentMisses(t *testing.T) {
	h := newHarness(t)
	h.gw.Store = &racingStore{Store: h.store, second: make(chan struct{})}
	hash := mj.HashAPIKey(h.keys["alice"])
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.gw.lookupKey(context.Background(), hash); err != nil {
				t.Errorf("lookup: %v", err)
			}
		}()
	}
	wg.Wait()
}

func TestProgressAtBounded(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.gw.Now = func() time.Time { return now }
	report := `{"percent": 1}`
	link := func(id string) string {
		scope := "jobs/" + id + "/1/progress"
		u, _ := url.Parse(h.gw.Signer.URLFor("/progress/", "PROGRESS", scope, scope, now.Add(time.Hour)))
		return u.RequestURI()
	}
	for _, id := range []string{"old1", "old2"} {
		h.do("POST", link(id), "", report) // unknown jobs: the time is kept all the same
	}
	now = now.Add(10 * time.Minute)
	h.do("POST", link("new"), "", report)
	n := 0
	h.gw.progressAt.Range(func(k, _ any) bool { n++; return true })
	if n > 1 {
		t.Fatalf("progressAt holds %d entries after 10 minutes", n)
	}
}
