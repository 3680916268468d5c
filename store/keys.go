package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (s *Store) accountKey(id string) string  { return s.p + "accounts/" + id }
func (s *Store) keyByHash(hash string) string { return s.p + "keys/" + hash }
func (s *Store) accountKeyIndex(account, keyID string) string {
	return s.p + "account_keys/" + account + "/" + keyID
}

// CreateAccount stores a new account.
func (s *Store) CreateAccount(ctx context.Context, name string) (*mj.Account, error) {
	a := &mj.Account{ID: uuid.NewString(), Name: name, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(a)
	if _, err := s.cli.Put(ctx, s.accountKey(a.ID), string(b)); err != nil {
		return nil, fmt.Errorf("store account: %w", err)
	}
	return a, nil
}

// Account returns an account by id.
func (s *Store) Account(ctx context.Context, id string) (*mj.Account, error) {
	resp, err := s.cli.Get(ctx, s.accountKey(id))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, mj.ErrNotFound
	}
	var a mj.Account
	return &a, json.Unmarshal(resp.Kvs[0].Value, &a)
}

// AddAPIKey stores a key for an account. Only the secret's hash and its first
// characters are kept. Adding the same secret twice is a no-op that returns the
// stored key (so `mediajobs dev` can reuse a fixed dev key across restarts).
func (s *Store) AddAPIKey(ctx context.Context, accountID, name, secret string) (*mj.APIKey, error) {
	hash := mj.HashAPIKey(secret)
	if k, err := s.APIKeyByHash(ctx, hash); err == nil {
		return k, nil
	}
	prefix := secret
	if len(prefix) > mj.APIKeyPrefixLen {
		prefix = prefix[:mj.APIKeyPrefixLen]
	}
	k := &mj.APIKey{ID: uuid.NewString(), AccountID: accountID, Name: name, Prefix: prefix, Hash: hash, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(k)
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.keyByHash(hash)), "=", 0)).
		Then(clientv3.OpPut(s.keyByHash(hash), string(b)), clientv3.OpPut(s.accountKeyIndex(accountID, k.ID), hash)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("store api key: %w", err)
	}
	return k, nil
}

// APIKeyByHash finds a key by the hash of its secret, or mj.ErrNotFound.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error) {
	resp, err := s.cli.Get(ctx, s.keyByHash(hash))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, mj.ErrNotFound
	}
	var k mj.APIKey
	return &k, json.Unmarshal(resp.Kvs[0].Value, &k)
}

// EnsureAccount creates the account with a fixed id unless it exists (dev setup).
func (s *Store) EnsureAccount(ctx context.Context, id, name string) (*mj.Account, error) {
	a := &mj.Account{ID: id, Name: name, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(a)
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.accountKey(id)), "=", 0)).
		Then(clientv3.OpPut(s.accountKey(id), string(b))).Commit()
	if err != nil {
		return nil, err
	}
	return s.Account(ctx, id)
}
