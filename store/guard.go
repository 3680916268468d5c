package store

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotLeader means a write was refused because the dispatcher that made it no
// longer holds its election key: a deposed leader changes nothing.
var ErrNotLeader = errors.New("this dispatcher is no longer the leader; the write was not made")

type guardKey struct{}

// WithGuard makes every store write made with ctx conditional on key still having
// been created at revision rev: the leader's election key, so a paused or
// partitioned leader that lost its session cannot write after a new one took over.
func WithGuard(ctx context.Context, key string, rev int64) context.Context {
	return context.WithValue(ctx, guardKey{}, clientv3.Compare(clientv3.CreateRevision(key), "=", rev))
}

func guardOf(ctx context.Context) (clientv3.Cmp, bool) {
	c, ok := ctx.Value(guardKey{}).(clientv3.Cmp)
	return c, ok
}

// commit runs If(cmps).Then(then).Else(els), under ctx's guard when it has one:
// the guard wraps the transaction, so its answer is the inner one's.
func (s *Store) commit(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	g, ok := guardOf(ctx)
	if !ok {
		return s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	}
	resp, err := s.cli.Txn(ctx).If(g).Then(clientv3.OpTxn(cmps, then, els)).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, ErrNotLeader
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}

// batch runs ops in one transaction, under ctx's guard when it has one.
func (s *Store) batch(ctx context.Context, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	txn := s.cli.Txn(ctx)
	g, guarded := guardOf(ctx)
	if guarded {
		txn = txn.If(g)
	}
	resp, err := txn.Then(ops...).Commit()
	if err == nil && guarded && !resp.Succeeded {
		return nil, ErrNotLeader
	}
	return resp, err
}
