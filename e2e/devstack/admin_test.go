package devstack

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

// admin runs `mediajobs ARGS -config cfg`: its exit code and stdout,
// with stderr checked to hold no secret.
func admin(t *testing.T, cfg string, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := e2e.Run(context.Background(), append(args, "-config", cfg), &out, &errs)
	if s := regexp.MustCompile(`mj_[A-Za-z0-9_]{16,}`).FindString(errs.String()); s != "" {
		t.Fatalf("%v: a secret went to stderr: %s", args, errs.String())
	}
	return code, out.String() + errs.String()
}

// TestAdminCommandsAgainstRunningDev: the admin commands reach the embedded etcd of
// a running `mediajobs dev` as clients (the config says embedded = true and where it
// listens; no second server starts), and what they do takes effect in the API.
func TestAdminCommandsAgainstRunningDev(t *testing.T) {
	e2e.NeedStack(t)
	endpoint := strings.TrimPrefix(e2e.Stack.Backends.Store.Client().Endpoints()[0], "http://")
	dataDir := filepath.Join(t.TempDir(), "must-not-exist")
	cfg := filepath.Join(t.TempDir(), "admin.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf("etcd {\n  embedded      = true\n  listen_client = %q\n  data_dir      = %q\n}\n", endpoint, dataDir)), 0o600)

	name := fmt.Sprintf("acme-%d", time.Now().UnixNano())
	if code, out := admin(t, cfg, "accounts", "create", "-name", name); code != 0 || !strings.Contains(out, "account "+name) {
		t.Fatalf("accounts create: exit %d\n%s", code, out)
	}
	if code, out := admin(t, cfg, "accounts", "create", "-name", name); code == 0 || !strings.Contains(out, "already exists") {
		t.Fatalf("second account of one name: exit %d\n%s", code, out)
	}
	if code, out := admin(t, cfg, "accounts", "list"); code != 0 || !strings.Contains(out, name) || !regexp.MustCompile(`(?m)^dev\s`).MatchString(out) {
		t.Fatalf("accounts list: exit %d\n%s", code, out)
	}

	secretRE := regexp.MustCompile(`secret\s+(mj_\S+)`)
	idRE := regexp.MustCompile(`key\s+\S+ \(([0-9a-f-]{36})\)`)
	var secrets, ids []string
	for _, k := range []string{"first", "second"} {
		code, out := admin(t, cfg, "keys", "create", "-account", name, "-name", k)
		s, id := secretRE.FindStringSubmatch(out), idRE.FindStringSubmatch(out)
		if code != 0 || s == nil || id == nil || !strings.Contains(out, "EXISTING account") {
			t.Fatalf("keys create: exit %d\n%s", code, out)
		}
		secrets, ids = append(secrets, s[1]), append(ids, id[1])
	}
	for _, s := range secrets {
		if r := e2e.Call(t, "GET", "/api/jobs", s, nil); r.Status != 200 {
			t.Fatalf("a created key: HTTP %d %s", r.Status, r.Body)
		}
	}
	if code, out := admin(t, cfg, "keys", "list", "-account", name); code != 0 || !strings.Contains(out, ids[0]) || !strings.Contains(out, "second") || strings.Contains(out, secrets[0]) {
		t.Fatalf("keys list: exit %d\n%s", code, out)
	}

	// Revoked by the start of its id: refused at once (gateways watch revocations).
	if code, out := admin(t, cfg, "keys", "revoke", "-account", name, "-key", ids[0][:8]); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("keys revoke: exit %d\n%s", code, out)
	}
	testenv.Eventually(t, 30*time.Second, "the revoked key to be refused", func() bool {
		return e2e.Call(t, "GET", "/api/jobs", secrets[0], nil).Status == 401
	})
	if r := e2e.Call(t, "GET", "/api/jobs", secrets[1], nil); r.Status != 200 {
		t.Fatalf("the other key after a revocation: HTTP %d", r.Status)
	}
	if code, out := admin(t, cfg, "keys", "revoke", "-account", name, "-key", ids[1]); code == 0 || !strings.Contains(out, "-force") {
		t.Fatalf("revoking the last key without -force: exit %d\n%s", code, out)
	}
	if code, out := admin(t, cfg, "keys", "revoke", "-account", name, "-key", ids[1], "-force"); code != 0 {
		t.Fatalf("revoke -force: exit %d\n%s", code, out)
	}
	testenv.Eventually(t, 30*time.Second, "the last key, revoked by force, to be refused", func() bool {
		return e2e.Call(t, "GET", "/api/jobs", secrets[1], nil).Status == 401
	})

	// keys create for a new name makes the account, as before.
	other := name + "-new"
	if code, out := admin(t, cfg, "keys", "create", "-account", other); code != 0 || !strings.Contains(out, "created") {
		t.Fatalf("keys create for a new account: exit %d\n%s", code, out)
	}
	if code, out := admin(t, cfg, "keys", "list", "-account", "nobody-"+name); code == 0 || !strings.Contains(out, "no account named") {
		t.Fatalf("keys list of an unknown account: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("an admin command touched the embedded etcd's data_dir (started a server?): %v", err)
	}
}

// TestAdminLoginLink: `accounts login-link` prints a one-time dashboard sign-in
// link that the running gateway honours once.
func TestAdminLoginLink(t *testing.T) {
	e2e.NeedStack(t)
	endpoint := strings.TrimPrefix(e2e.Stack.Backends.Store.Client().Endpoints()[0], "http://")
	cfg := filepath.Join(t.TempDir(), "admin.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf("etcd {\n  embedded      = true\n  listen_client = %q\n  data_dir      = %q\n}\n", endpoint, t.TempDir())), 0o600)
	name := fmt.Sprintf("link-%d", time.Now().UnixNano())
	if code, out := admin(t, cfg, "accounts", "create", "-name", name); code != 0 {
		t.Fatalf("accounts create: exit %d\n%s", code, out)
	}
	code, out := admin(t, cfg, "accounts", "login-link", "-account", name, "-url", e2e.Stack.URL+"/")
	link := strings.TrimSpace(out)
	if code != 0 || !regexp.MustCompile(`^`+regexp.QuoteMeta(e2e.Stack.URL)+`/dashboard/login\?token=[0-9a-f]{64}$`).MatchString(link) {
		t.Fatalf("login-link: exit %d\n%s", code, out)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// The link shows a confirmation page; its form posts the token.
	open := func(used bool) (*http.Response, *http.Cookie) {
		t.Helper()
		page, err := noFollow.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		page.Body.Close()
		// A used link's page already sends the browser to the error.
		if used && (page.StatusCode != 303 || page.Header.Get("Location") != "/dashboard/?error=link") || !used && page.StatusCode != 200 {
			t.Fatalf("the link's page (used %v): %d %v", used, page.StatusCode, page.Header)
		}
		// The confirmation is posted either way: it must refuse a used link too.
		u, _ := url.Parse(link)
		req, _ := http.NewRequest("POST", e2e.Stack.URL+"/dashboard/login", strings.NewReader(url.Values{"token": {u.Query().Get("token")}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == "mj_session" {
				return resp, c
			}
		}
		return resp, nil
	}
	resp, cookie := open(false)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/dashboard/" || cookie == nil || !cookie.HttpOnly {
		t.Fatalf("the link: %d %v", resp.StatusCode, resp.Header)
	}
	r := e2e.Call(t, "GET", "/dashboard/session", "", nil, "Cookie", "mj_session="+cookie.Value)
	if r.Status != 200 || r.Data(t)["account"].(map[string]any)["name"] != name {
		t.Fatalf("the link's session: %d %s", r.Status, r.Body)
	}
	if resp, cookie := open(true); resp.StatusCode != 303 || resp.Header.Get("Location") != "/dashboard/?error=link" || cookie != nil {
		t.Fatalf("the link used twice: %d %v", resp.StatusCode, resp.Header)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-account", name, "-ttl", "2h"}, "at most 1h0m0s"},
		{[]string{"-account", "nobody-" + name}, "no account named"},
		{[]string{}, "-account is required"},
		{[]string{"-account", name, "-url", "ftp://x"}, "absolute http(s)"},
	} {
		if code, out := admin(t, cfg, append([]string{"accounts", "login-link"}, c.args...)...); code == 0 || !strings.Contains(out, c.want) {
			t.Fatalf("login-link %v: exit %d\n%s", c.args, code, out)
		}
	}
}
