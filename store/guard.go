package store

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader means a write was refused because the dispatcher that made it no
// longer holds its election key: a deposed leader changes nothing.
var ErrNotLeader = errors.New("this dispatcher is no longer the leader; the write was not made")

// LeaderSession is a dispatcher's etcd session: it lives while the process keeps it
// alive, and ends (Done) when etcd stops hearing from it for its TTL.
type LeaderSession struct {
	s     *Store
	sess  *concurrency.Session
	votes string
}

// NewLeaderSession opens a session with ttl (whole seconds, at least one).
func (s *Store) NewLeaderSession(ctx context.Context, ttl time.Duration) (*LeaderSession, error) {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return &LeaderSession{s: s, sess: sess, votes: s.ElectionPrefix()}, nil
}

// Done is closed when the session has ended.
func (se *LeaderSession) Done() <-chan struct{} { return se.sess.Done() }

// Close ends the session (and with it any term it holds).
func (se *LeaderSession) Close() { se.sess.Close() }

// Orphan stops keeping the session alive, without revoking it: it lapses after
// its TTL (a process that cannot reach etcd to say it goes).
func (se *LeaderSession) Orphan() { se.sess.Orphan() }

// Campaign waits until this session leads the dispatchers, as name, and returns
// the term it leads for.
func (se *LeaderSession) Campaign(ctx context.Context, name string) (*Term, error) {
	el := concurrency.NewElection(se.sess, se.votes)
	if err := el.Campaign(ctx, name); err != nil {
		return nil, err
	}
	return &Term{el: el, store: se.s.FencedBy(el.Key(), el.Rev())}, nil
}

// Term is one leadership: it lasts until its session ends or it resigns.
type Term struct {
	el    *concurrency.Election
	store *Store
}

// Store is the leader's store for this term: every write it makes is
// conditioned on the term's election key, so a paused or partitioned leader that
// lost its session writes nothing after the next one took over (ErrNotLeader).
func (t *Term) Store() *Store { return t.store }

// Resign gives leadership up, so a standby need not wait out the session's TTL.
func (t *Term) Resign(ctx context.Context) error { return t.el.Resign(ctx) }

// FencedBy is s with every write conditioned on key still having been created
// at revision rev (a term's election key; tests name others). Reads are as s's.
func (s *Store) FencedBy(key string, rev int64) *Store {
	f := *s
	g := clientv3.Compare(clientv3.CreateRevision(key), "=", rev)
	f.guard = &g
	return &f
}

// commit runs If(cmps).Then(then).Else(els), under the store's guard when it has
// one: the guard wraps the transaction, so its answer is the inner one's.
func (s *Store) commit(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if s.guard == nil {
		return s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	}
	resp, err := s.cli.Txn(ctx).If(*s.guard).Then(clientv3.OpTxn(cmps, then, els)).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, ErrNotLeader
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}

// batch runs ops in one transaction, under the store's guard when it has one.
func (s *Store) batch(ctx context.Context, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	txn := s.cli.Txn(ctx)
	if s.guard != nil {
		txn = txn.If(*s.guard)
	}
	resp, err := txn.Then(ops...).Commit()
	if err == nil && s.guard != nil && !resp.Succeeded {
		return nil, ErrNotLeader
	}
	return resp, err
}
