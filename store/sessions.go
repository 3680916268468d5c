package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Dashboard sessions and one-time sign-in links. Both live in etcd under a lease
// of their lifetime, so etcd forgets them by itself when they expire. Their ids
// (the cookie, the link's token) are stored only as SHA-256 hashes: reading etcd
// yields nothing a browser could present.
//
//	sessions/<sha256(id)>                     the session (JSON), leased
//	session_index/<key hash>/<sha256(id)>     the lease id (hex): the sessions a key opened, leased
//	session_index/login-link.<account>/<sha256(id)>   the same for the account's sign-in links
//	login_tokens/<sha256(token)>              the link's account (JSON), leased
//	links_ended/<account>                     the id of the key whose revocation shut the account out

// LoginLinkKey is the key hash recorded for a session opened by a sign-in link
// (no API key signed it in).
const LoginLinkKey = "login-link"

// linkSessions is the session index entry of an account's sign-in-link
// sessions: they end when its last key is revoked (revokeAPIKey), an operator
// shutting the account out.
func linkSessions(accountID string) string { return LoginLinkKey + "." + accountID }

// index is the session index entry the session is listed under: its key's, or
// its account's links'.
func (sess *Session) index() string {
	if sess.KeyHash == LoginLinkKey {
		return linkSessions(sess.AccountID)
	}
	return sess.KeyHash
}

// Session is a signed-in dashboard browser.
type Session struct {
	// ID is the cookie's value: set by CreateSession only, never stored.
	ID        string `json:"-"`
	AccountID string `json:"account_id"`
	// KeyHash is the hash of the API key that signed in (LoginLinkKey for a link):
	// the session ends with that key.
	KeyHash   string    `json:"key_hash"`
	CSRFToken string    `json:"csrf_token"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Lease     int64     `json:"lease"`
	// Rev is the etcd revision that created the session (not stored): a link's
	// session made before the account was shut out has ended (LinksEnded).
	Rev int64 `json:"-"`
}

// LoginToken is what a sign-in link's token stands for.
type LoginToken struct {
	AccountID string    `json:"account_id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Lease     int64     `json:"lease"`
	Rev       int64     `json:"-"` // the revision that created it, as Session.Rev
}

func (s *Store) sessionKey(id string) string { return s.p + "sessions/" + hashID(id) }
func (s *Store) sessionIndexPrefix(keyHash string) string {
	return s.p + "session_index/" + keyHash + "/"
}
func (s *Store) loginTokenKey(token string) string { return s.p + "login_tokens/" + hashID(token) }

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// RandomToken returns 32 random bytes, hex-encoded.
func RandomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// leaseSeconds is ttl rounded up to whole seconds (etcd's unit), at least 1.
func leaseSeconds(ttl time.Duration) int64 {
	return max(int64(math.Ceil(ttl.Seconds())), 1)
}

// CreateSession opens a session of ttl for the account, signed in by the key with
// keyHash (or LoginLinkKey). The returned session carries its new ID.
func (s *Store) CreateSession(ctx context.Context, accountID, keyHash string, ttl time.Duration) (*Session, error) {
	lease, err := s.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, fmt.Errorf("session lease: %w", err)
	}
	now := time.Now().UTC()
	sess := &Session{ID: RandomToken(), AccountID: accountID, KeyHash: keyHash, CSRFToken: RandomToken(),
		CreatedAt: now, ExpiresAt: now.Add(ttl), Lease: int64(lease.ID)}
	b, _ := json.Marshal(sess)
	ops := []clientv3.Op{clientv3.OpPut(s.sessionKey(sess.ID), string(b), clientv3.WithLease(lease.ID))}
	ops = append(ops, clientv3.OpPut(s.sessionIndexPrefix(sess.index())+hashID(sess.ID), strconv.FormatInt(int64(lease.ID), 16), clientv3.WithLease(lease.ID)))
	if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		s.revokeLease(int64(lease.ID))
		return nil, fmt.Errorf("store session: %w", err)
	}
	return sess, nil
}

// Session returns the session whose cookie is id, or mj.ErrNotFound. Callers
// check ExpiresAt and that its key still exists.
func (s *Store) Session(ctx context.Context, id string) (*Session, error) {
	if id == "" {
		return nil, mj.ErrNotFound
	}
	resp, err := s.cli.Get(ctx, s.sessionKey(id))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, mj.ErrNotFound
	}
	var sess Session
	if err := json.Unmarshal(resp.Kvs[0].Value, &sess); err != nil {
		return nil, err
	}
	sess.ID, sess.Rev = id, resp.Kvs[0].CreateRevision
	return &sess, nil
}

func (s *Store) linksEndedKey(accountID string) string { return s.p + "links_ended/" + accountID }

// LinksEnded tells whether the account's sign-in links and their sessions made
// at revision rev (Session.Rev, LoginToken.Rev) have ended: the account's last
// key was revoked since. Revoking writes this in the same transaction as the key's
// deletion, so it holds even when deleting the sessions fails; comparing
// revisions, not clocks, needs no agreement between machines.
func (s *Store) LinksEnded(ctx context.Context, accountID string, rev int64) (bool, error) {
	resp, err := s.cli.Get(ctx, s.linksEndedKey(accountID))
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0 && resp.Kvs[0].ModRevision > rev, nil
}

// DeleteSession ends the session whose cookie is id (signing out). Ending one that
// does not exist is no error.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	sess, err := s.Session(ctx, id)
	if err == mj.ErrNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	// Revoking the lease deletes the session and its index entry together.
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(sess.Lease)); err != nil && ctx.Err() == nil {
		// The lease may be gone already (expired); delete the keys themselves.
		_, err = s.cli.Txn(ctx).Then(clientv3.OpDelete(s.sessionKey(id)),
			clientv3.OpDelete(s.sessionIndexPrefix(sess.index())+hashID(id))).Commit()
		return err
	}
	return ctx.Err()
}

// DeleteKeySessions ends every session the key with keyHash signed in (the key was
// revoked). It returns how many it ended.
func (s *Store) DeleteKeySessions(ctx context.Context, keyHash string) (int, error) {
	if keyHash == "" || keyHash == LoginLinkKey {
		return 0, nil
	}
	resp, err := s.cli.Get(ctx, s.sessionIndexPrefix(keyHash), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range resp.Kvs {
		sidHash := string(kv.Key[len(s.sessionIndexPrefix(keyHash)):])
		if lease, err := strconv.ParseInt(string(kv.Value), 16, 64); err == nil {
			if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(lease)); err == nil {
				n++
				continue
			}
		}
		if _, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(s.p+"sessions/"+sidHash), clientv3.OpDelete(string(kv.Key))).Commit(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (s *Store) revokeLease(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.cli.Revoke(ctx, clientv3.LeaseID(id))
}

// CreateLoginToken stores a one-time sign-in token for the account, valid for ttl,
// and returns it (only its hash is stored).
func (s *Store) CreateLoginToken(ctx context.Context, accountID string, ttl time.Duration) (string, time.Time, error) {
	lease, err := s.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("login token lease: %w", err)
	}
	token := RandomToken()
	now := time.Now().UTC()
	t := &LoginToken{AccountID: accountID, CreatedAt: now, ExpiresAt: now.Add(ttl), Lease: int64(lease.ID)}
	b, _ := json.Marshal(t)
	if _, err := s.cli.Put(ctx, s.loginTokenKey(token), string(b), clientv3.WithLease(lease.ID)); err != nil {
		s.revokeLease(int64(lease.ID))
		return "", time.Time{}, fmt.Errorf("store login token: %w", err)
	}
	return token, t.ExpiresAt, nil
}

// LoginToken returns what the token stands for without using it up (the link's
// confirmation page names the account). An unknown, used or expired token is
// mj.ErrNotFound.
func (s *Store) LoginToken(ctx context.Context, token string, now time.Time) (*LoginToken, error) {
	if token == "" {
		return nil, mj.ErrNotFound
	}
	resp, err := s.cli.Get(ctx, s.loginTokenKey(token))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, mj.ErrNotFound
	}
	var t LoginToken
	if err := json.Unmarshal(resp.Kvs[0].Value, &t); err != nil {
		return nil, err
	}
	if !now.Before(t.ExpiresAt) {
		return nil, mj.ErrNotFound
	}
	t.Rev = resp.Kvs[0].CreateRevision
	return &t, nil
}

// ConsumeLoginToken deletes the token and returns what it stood for: a token
// works once (of two concurrent uses, one gets it). An unknown, used or expired
// token is mj.ErrNotFound.
func (s *Store) ConsumeLoginToken(ctx context.Context, token string, now time.Time) (*LoginToken, error) {
	if token == "" {
		return nil, mj.ErrNotFound
	}
	resp, err := s.cli.Delete(ctx, s.loginTokenKey(token), clientv3.WithPrevKV())
	if err != nil {
		return nil, err
	}
	if resp.Deleted != 1 || len(resp.PrevKvs) == 0 {
		return nil, mj.ErrNotFound
	}
	var t LoginToken
	if err := json.Unmarshal(resp.PrevKvs[0].Value, &t); err != nil {
		return nil, err
	}
	t.Rev = resp.PrevKvs[0].CreateRevision
	s.revokeLease(t.Lease) // it holds nothing more
	if !now.Before(t.ExpiresAt) {
		return nil, mj.ErrNotFound // its lease had not run out yet
	}
	return &t, nil
}
