package blob

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestSignedURLs(t *testing.T) {
	s := Signer{Secret: []byte("0123456789abcdef"), Base: "http://127.0.0.1:8080"}
	now := time.Unix(1_700_000_000, 0)
	verify := func(method, raw string, at time.Time) error {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return s.Verify(method, strings.TrimPrefix(u.Path, "/files/"), u.Query(), at)
	}
	get := s.URL("GET", "jobs/1/out.mp4", "jobs/1/out.mp4", now.Add(time.Hour))
	if err := verify("GET", get, now); err != nil {
		t.Fatalf("fresh link refused: %v", err)
	}
	if err := verify("GET", get, now.Add(2*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired link: %v", err)
	}
	if err := verify("PUT", get, now); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("GET link used for PUT: %v", err)
	}
	for name, tamper := range map[string]func(string) string{
		"other key":    func(u string) string { return strings.Replace(u, "out.mp4", "in.mp4", 1) },
		"later expiry": func(u string) string { return strings.Replace(u, "e=17000036", "e=27000036", 1) },
		"sig byte":     func(u string) string { return strings.Replace(u, "sig=", "sig=A", 1) },
		"add scope":    func(u string) string { return u + "&s=jobs/" },
	} {
		if err := verify("GET", tamper(get), now); err == nil {
			t.Errorf("tampered link (%s) accepted", name)
		}
	}
	put := s.URL("PUT", "jobs/1/run/", "jobs/1/run/{path}", now.Add(time.Hour))
	put = strings.Replace(put, "%7Bpath%7D", "outputs/seg_001.ts", 1)
	if err := verify("PUT", put, now); err != nil {
		t.Fatalf("scoped upload refused: %v", err)
	}
	escape := strings.Replace(put, "jobs/1/run/outputs", "jobs/2/run/outputs", 1)
	if err := verify("PUT", escape, now); err == nil {
		t.Fatal("scoped link reached outside its scope")
	}
}
