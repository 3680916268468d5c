package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestAccountNamesUnique: one name, one account, even when creates race; accounts
// stored before the name index still count; dev's EnsureAccount claims its name.
func TestAccountNamesUnique(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var made, refused int
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.CreateAccount(ctx, "acme")
			mu.Lock()
			defer mu.Unlock()
			var me *mj.Error
			switch {
			case err == nil:
				made++
			case errors.As(err, &me) && me.Code == mj.EConflict:
				refused++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if made != 1 || refused != 7 {
		t.Fatalf("8 racing creates of one name: %d made, %d refused", made, refused)
	}
	a, err := s.AccountByName(ctx, "acme")
	if err != nil || a.Name != "acme" {
		t.Fatalf("AccountByName: %+v %v", a, err)
	}
	if _, err := s.AccountByName(ctx, "nobody"); err != mj.ErrNotFound {
		t.Fatalf("unknown name: %v", err)
	}

	// An account written before the index existed.
	old, _ := json.Marshal(&mj.Account{ID: "legacy-id", Name: "legacy", CreatedAt: time.Now().UTC()})
	e.Client.Put(ctx, "/test/accounts/legacy-id", string(old))
	if a, err := s.AccountByName(ctx, "legacy"); err != nil || a.ID != "legacy-id" {
		t.Fatalf("legacy account: %+v %v", a, err)
	}
	if _, err := s.CreateAccount(ctx, "legacy"); err == nil {
		t.Fatal("created a second account named like a legacy one")
	}

	if _, err := s.EnsureAccount(ctx, "dev", "dev"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureAccount(ctx, "dev", "dev"); err != nil {
		t.Fatal("EnsureAccount is not idempotent:", err)
	}
	if _, err := s.CreateAccount(ctx, "dev"); err == nil {
		t.Fatal("created a second account named dev")
	}
	list, err := s.ListAccounts(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("ListAccounts: %d accounts, %v", len(list), err)
	}
}
