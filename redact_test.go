package mediajobs

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestHostOnlyURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.zapier.com/hooks/catch/123456/abcdef/":             "https://hooks.zapier.com/…",
		"https://hook.eu1.make.com/xyzsecret":                             "https://hook.eu1.make.com/…",
		"https://n8n.example:5678/webhook/5f1c-uuid?token=t":              "https://n8n.example:5678/…",
		"http://user:pass@receiver.example:8080/p#frag":                   "http://receiver.example:8080/…",
		"https://receiver.example":                                        "https://receiver.example",
		"https://receiver.example/":                                       "https://receiver.example",
		"https://receiver.example?sig=1":                                  "https://receiver.example/…",
		"http://[::1]:9000/x":                                             "http://[::1]:9000/…",
		"not a url":                                                       "…",
		"hooks.zapier.com/hooks/catch/1/2":                                "…",
		"https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXX": "https://hooks.slack.com/…",
	} {
		if got := HostOnlyURL(in); got != want {
			t.Errorf("HostOnlyURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactHostOnly(t *testing.T) {
	raw := "https://user:pw@hooks.zapier.com/hooks/catch/123/a b?x=1"
	// What net/http says of a failed POST: the URL re-serialised, password starred.
	down := roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("dial tcp: connection refused") })
	_, err := (&http.Client{Transport: down}).Post("https://user:pw@hooks.zapier.com/hooks/catch/123/a%20b?x=1", "text/plain", nil)
	msg := RedactHostOnly(err.Error(), "https://user:pw@hooks.zapier.com/hooks/catch/123/a%20b?x=1")
	if strings.Contains(msg, "catch") || strings.Contains(msg, "pw") || strings.Contains(msg, "user") || !strings.Contains(msg, `"https://hooks.zapier.com/…": dial tcp`) {
		t.Fatalf("RedactHostOnly = %q (from %q)", msg, err)
	}
	msg = RedactHostOnly(`Post "`+raw+`": EOF`, raw)
	if msg != `Post "https://hooks.zapier.com/…": EOF` {
		t.Fatalf("RedactHostOnly = %q", msg)
	}
	if RedactHostOnly("receiver answered HTTP 500", raw) != "receiver answered HTTP 500" {
		t.Fatal("RedactHostOnly changed a text without the URL")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRedactURLs(t *testing.T) {
	for in, want := range map[string]string{
		"[concat @ 0x1] Impossible to open 'https://u:p@example.com/b.mp4?X-Amz-Signature=s3cret'": "[concat @ 0x1] Impossible to open 'https://example.com/b.mp4'",
		"Unsafe file name 'http://h/x.mp4#frag'":                                                   "Unsafe file name 'http://h/x.mp4'",
		"no URL here: inputs/a.mp4":                                                                "no URL here: inputs/a.mp4",
		"rtmp://user:pw@live.example:1935/app?key=k1 failed":                                       "rtmp://live.example:1935/app failed",
	} {
		if got := RedactURLs(in); got != want {
			t.Errorf("RedactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

// RedactError hides a signed link in an error's text, and leaves an error that
// does not name it as it is (it still unwraps).
func TestRedactError(t *testing.T) {
	raw := "https://store.example/b/k?X-Amz-Signature=0123456789abcdef&X-Amz-Expires=3600"
	err := RedactError(errors.New(`Get "`+raw+`": EOF`), raw)
	if strings.Contains(err.Error(), "0123456789abcdef") || !strings.Contains(err.Error(), "https://store.example/b/k") {
		t.Fatalf("RedactError = %q", err)
	}
	base := errors.New("connection refused")
	wrapped := fmt.Errorf("fetch: %w", base)
	if got := RedactError(wrapped, raw); got != wrapped || !errors.Is(got, base) {
		t.Fatalf("an error without the URL changed: %v", got)
	}
	if RedactError(nil, raw) != nil {
		t.Fatal("RedactError(nil) is not nil")
	}
}
