package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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

// accountNameKey indexes accounts by name (its value: the account id), which makes
// names unique.
func (s *Store) accountNameKey(name string) string { return s.p + "account_names/" + name }

// CreateAccount stores a new account. Names are unique: a name already taken is an
// mj.EConflict error.
func (s *Store) CreateAccount(ctx context.Context, name string) (*mj.Account, error) {
	taken := mj.Errorf(mj.EConflict, "account %q already exists", name)
	// Accounts stored before the name index have no entry in it.
	if _, err := s.AccountByName(ctx, name); err == nil {
		return nil, taken
	} else if !errors.Is(err, mj.ErrNotFound) {
		return nil, err
	}
	a := &mj.Account{ID: uuid.NewString(), Name: name, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(a)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.accountNameKey(name)), "=", 0)).
		Then(clientv3.OpPut(s.accountKey(a.ID), string(b)), clientv3.OpPut(s.accountNameKey(name), a.ID)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("store account: %w", err)
	}
	if !resp.Succeeded {
		return nil, taken
	}
	return a, nil
}

// AccountByName returns the account named name, or mj.ErrNotFound.
func (s *Store) AccountByName(ctx context.Context, name string) (*mj.Account, error) {
	resp, err := s.cli.Get(ctx, s.accountNameKey(name))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) > 0 {
		return s.Account(ctx, string(resp.Kvs[0].Value))
	}
	accounts, err := s.ListAccounts(ctx) // accounts from before the index
	if err != nil {
		return nil, err
	}
	for _, a := range accounts {
		if a.Name == name {
			return a, nil
		}
	}
	return nil, mj.ErrNotFound
}

// ListAccounts returns every account, oldest first.
func (s *Store) ListAccounts(ctx context.Context) ([]*mj.Account, error) {
	resp, err := s.cli.Get(ctx, s.p+"accounts/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]*mj.Account, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var a mj.Account
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return nil, err
		}
		out = append(out, &a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
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

// EnsureAccount creates the account with a fixed id unless it exists (dev setup),
// and claims its name in the name index unless another account holds it.
func (s *Store) EnsureAccount(ctx context.Context, id, name string) (*mj.Account, error) {
	a := &mj.Account{ID: id, Name: name, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(a)
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.accountKey(id)), "=", 0)).
		Then(clientv3.OpPut(s.accountKey(id), string(b))).Commit()
	if err != nil {
		return nil, err
	}
	a, err = s.Account(ctx, id)
	if err != nil {
		return nil, err
	}
	_, err = s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.accountNameKey(a.Name)), "=", 0)).
		Then(clientv3.OpPut(s.accountNameKey(a.Name), id)).Commit()
	if err != nil {
		return nil, err
	}
	return a, nil
}

// keyPage is how many keys ListAPIKeys reads per etcd request: an etcd
// transaction holds at most 128 operations (--max-txn-ops).
const keyPage = 100

// ListAPIKeys returns an account's keys, oldest first, however many: the index is
// read in pages of keyPage, each page's keys in one transaction, all at the
// revision of the first page.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]*mj.APIKey, error) {
	prefix := s.p + "account_keys/" + accountID + "/"
	end := clientv3.GetPrefixRangeEnd(prefix)
	keys := []*mj.APIKey{}
	var rev int64
	for from := prefix; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(keyPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		idx, err := s.cli.Get(ctx, from, opts...)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			rev = idx.Header.Revision
		}
		ops := make([]clientv3.Op, len(idx.Kvs))
		for i, kv := range idx.Kvs {
			ops[i] = clientv3.OpGet(s.keyByHash(string(kv.Value)), clientv3.WithRev(rev))
		}
		tx, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for _, r := range tx.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				var k mj.APIKey
				if err := json.Unmarshal(kv.Value, &k); err != nil {
					return nil, err
				}
				keys = append(keys, &k)
			}
		}
		if !idx.More || len(idx.Kvs) == 0 {
			break
		}
		from = string(idx.Kvs[len(idx.Kvs)-1].Key) + "\x00"
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a].CreatedAt.Before(keys[b].CreatedAt) })
	return keys, nil
}

// APIKeyHash returns the hash of the account's key with this id, or an
// mj.ENotFound error; it reads one index entry, however many keys the account has.
func (s *Store) APIKeyHash(ctx context.Context, accountID, keyID string) (string, error) {
	resp, err := s.cli.Get(ctx, s.accountKeyIndex(accountID, keyID))
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", mj.Errorf(mj.ENotFound, "API key %s not found", keyID)
	}
	return string(resp.Kvs[0].Value), nil
}

// RevokeAPIKey deletes one of an account's keys. The last key cannot be revoked, so
// an account is never locked out of its own API.
func (s *Store) RevokeAPIKey(ctx context.Context, accountID, keyID string) error {
	return s.revokeAPIKey(ctx, accountID, keyID, false)
}

// RevokeAnyAPIKey is RevokeAPIKey that may revoke the account's last key too (an
// operator's `mediajobs keys revoke -force`, for a leaked key).
func (s *Store) RevokeAnyAPIKey(ctx context.Context, accountID, keyID string) error {
	return s.revokeAPIKey(ctx, accountID, keyID, true)
}

func (s *Store) revokeAPIKey(ctx context.Context, accountID, keyID string, last bool) error {
	idxPrefix := s.p + "account_keys/" + accountID + "/"
	// Every revocation bumps this key; reading it in the same snapshot as the index
	// and comparing it on write stops two concurrent revocations from removing the
	// last two keys together.
	verKey := s.p + "account_keys_version/" + accountID
	for {
		// The key's own index entry and a count of the others: no read grows with
		// the number of keys.
		snap, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.accountKeyIndex(accountID, keyID)),
			clientv3.OpGet(idxPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()), clientv3.OpGet(verKey)).Commit()
		if err != nil {
			return err
		}
		var ver int64
		if v := snap.Responses[2].GetResponseRange().Kvs; len(v) > 0 {
			ver = v[0].Version
		}
		var hash string
		if kv := snap.Responses[0].GetResponseRange().Kvs; len(kv) > 0 {
			hash = string(kv[0].Value)
		}
		if hash == "" {
			return mj.Errorf(mj.ENotFound, "API key %s not found", keyID)
		}
		lastKey := snap.Responses[1].GetResponseRange().Count == 1
		if lastKey && !last {
			return mj.Errorf(mj.EConflict, "this is the account's last API key; create another before revoking it")
		}
		ops := []clientv3.Op{clientv3.OpDelete(s.accountKeyIndex(accountID, keyID)), clientv3.OpDelete(s.keyByHash(hash)), clientv3.OpPut(verKey, keyID)}
		if lastKey {
			// The account is shut out: its sign-in links and their sessions end
			// here, whatever becomes of deleting them below (LinksEnded).
			ops = append(ops, clientv3.OpPut(s.linksEndedKey(accountID), keyID))
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Version(verKey), "=", ver)).
			Then(ops...).
			Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			// The dashboard sessions the key signed in end with it. Should this fail,
			// they are refused all the same (a session's key must still exist, a
			// link's must be newer than links_ended/) and expire by their lease.
			s.DeleteKeySessions(ctx, hash)
			if lastKey { // and so do the sign-in links': the account is shut out
				s.DeleteKeySessions(ctx, linkSessions(accountID))
			}
			return nil
		}
	}
}

// KeysPrefix holds the keys by hash; gateways watch it to drop revoked keys from
// their caches at once.
func (s *Store) KeysPrefix() string { return s.p + "keys/" }

// TouchAPIKey records that a key was used at t (callers rate-limit this).
func (s *Store) TouchAPIKey(ctx context.Context, hash string, t time.Time) error {
	for {
		resp, err := s.cli.Get(ctx, s.keyByHash(hash))
		if err != nil || len(resp.Kvs) == 0 {
			return err
		}
		var k mj.APIKey
		if err := json.Unmarshal(resp.Kvs[0].Value, &k); err != nil {
			return err
		}
		t := t.UTC()
		k.LastUsed = &t
		b, _ := json.Marshal(&k)
		tx, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.keyByHash(hash)), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(s.keyByHash(hash), string(b))).Commit()
		if err != nil || tx.Succeeded {
			return err
		}
	}
}

// WatchRevokedKeys calls fn with the hash of every key deleted from now until ctx
// ends. Gateways use it to drop revoked keys from their caches at once.
func (s *Store) WatchRevokedKeys(ctx context.Context, fn func(hash string)) {
	for ctx.Err() == nil {
		for resp := range s.cli.Watch(clientv3.WithRequireLeader(ctx), s.KeysPrefix(), clientv3.WithPrefix(), clientv3.WithFilterPut()) {
			for _, ev := range resp.Events {
				fn(IDFromKey(string(ev.Kv.Key)))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// SetWebhookSecret sets (or, with "", removes) the account's webhook signing secret.
func (s *Store) SetWebhookSecret(ctx context.Context, accountID, secret string) error {
	for {
		resp, err := s.cli.Get(ctx, s.accountKey(accountID))
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return mj.ErrNotFound
		}
		var a mj.Account
		if err := json.Unmarshal(resp.Kvs[0].Value, &a); err != nil {
			return err
		}
		a.WebhookSecret = secret
		b, _ := json.Marshal(&a)
		tx, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.accountKey(accountID)), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(s.accountKey(accountID), string(b))).Commit()
		if err != nil || tx.Succeeded {
			return err
		}
	}
}
