package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

func TestKeysCreate(t *testing.T) {
	_, e := testenv.Etcd(t)
	cfgFile := filepath.Join(t.TempDir(), "mediajobs.hcl")
	os.WriteFile(cfgFile, []byte(`etcd {
  embedded  = false
  endpoints = ["`+e.Endpoint()+`"]
  prefix    = "/keystest/"
}
`), 0o600)
	var out bytes.Buffer
	if code := run(context.Background(), []string{"keys", "create", "-account", "acme", "-name", "ci", "-config", cfgFile}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	secret := regexp.MustCompile(`secret\s+(mj_\S+)`).FindStringSubmatch(out.String())
	if secret == nil {
		t.Fatalf("no secret printed:\n%s", out.String())
	}
	s := store.New(e.Client, "/keystest/")
	k, err := s.APIKeyByHash(context.Background(), mj.HashAPIKey(secret[1]))
	if err != nil || k.Name != "ci" {
		t.Fatalf("stored key %+v, %v", k, err)
	}
	a, err := s.Account(context.Background(), k.AccountID)
	if err != nil || a.Name != "acme" {
		t.Fatalf("account %+v, %v", a, err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"keys", "create"}, &out, &out); code == 0 || !strings.Contains(out.String(), "-account is required") {
		t.Fatalf("missing -account: exit %d %s", code, out.String())
	}
}
