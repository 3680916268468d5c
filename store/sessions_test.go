package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sessions are leased for their lifetime, stored by the hash of their id, and end
// with the key that opened them.
func TestSessions(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	a, _ := s.CreateAccount(ctx, "acme")
	secrets := []string{mj.NewAPIKeySecret(), mj.NewAPIKeySecret()}
	var keys []*mj.APIKey
	for _, sec := range secrets {
		k, err := s.AddAPIKey(ctx, a.ID, "k", sec)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	one, err := s.CreateSession(ctx, a.ID, keys[0].Hash, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	two, _ := s.CreateSession(ctx, a.ID, keys[0].Hash, time.Hour)
	kept, _ := s.CreateSession(ctx, a.ID, keys[1].Hash, time.Hour)
	link, _ := s.CreateSession(ctx, a.ID, store.LoginLinkKey, time.Hour)
	got, err := s.Session(ctx, one.ID)
	if err != nil || got.AccountID != a.ID || got.CSRFToken != one.CSRFToken || got.KeyHash != keys[0].Hash || got.ID != one.ID {
		t.Fatalf("Session: %+v %v", got, err)
	}
	ttl, err := e.Client.TimeToLive(ctx, clientv3.LeaseID(got.Lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || ttl.TTL > 3600 || len(ttl.Keys) != 2 {
		t.Fatalf("lease: %+v %v", ttl, err)
	}
	if err := s.RevokeAPIKey(ctx, a.ID, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	for _, sess := range []*store.Session{one, two} {
		if _, err := s.Session(ctx, sess.ID); err != mj.ErrNotFound {
			t.Fatalf("a revoked key's session: %v", err)
		}
	}
	for _, sess := range []*store.Session{kept, link} {
		if _, err := s.Session(ctx, sess.ID); err != nil {
			t.Fatalf("another session: %v", err)
		}
	}
	if err := s.DeleteSession(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, kept.ID); err != mj.ErrNotFound {
		t.Fatalf("after DeleteSession: %v", err)
	}
	if err := s.DeleteSession(ctx, kept.ID); err != nil {
		t.Fatalf("deleting it again: %v", err)
	}
	// A link's session outlives any one key, not the account's last.
	if err := s.RevokeAnyAPIKey(ctx, a.ID, keys[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, link.ID); err != mj.ErrNotFound {
		t.Fatalf("a link's session after the account's last key was revoked: %v", err)
	}
	// Nothing of the revoked keys' sessions is left.
	resp, _ := e.Client.Get(ctx, "/test/session_index/", clientv3WithPrefix())
	if len(resp.Kvs) != 0 {
		t.Fatalf("%d index entries left", len(resp.Kvs))
	}
}

// A sign-in token works once, even when used twice at once, and not after it
// expires.
func TestLoginTokens(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	tok, exp, err := s.CreateLoginToken(ctx, "acct", 10*time.Minute)
	if err != nil || len(tok) != 64 || time.Until(exp) < 9*time.Minute {
		t.Fatalf("CreateLoginToken: %q %v %v", tok, exp, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lt, err := s.ConsumeLoginToken(ctx, tok, time.Now())
			if err == nil && lt.AccountID == "acct" {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if err != mj.ErrNotFound {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("a token used %d times", wins)
	}
	tok, _, _ = s.CreateLoginToken(ctx, "acct", 10*time.Minute)
	if _, err := s.ConsumeLoginToken(ctx, tok, time.Now().Add(11*time.Minute)); err != mj.ErrNotFound {
		t.Fatalf("an expired token: %v", err)
	}
}
