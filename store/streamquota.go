package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event streams open per account (docs/limits.md): one key per open stream,
// streams/<account>/<id>, attached to a lease this process keeps alive, so the
// keys of a gateway that dies go with its lease (streamTTL). The limit is a
// count-only read of the prefix; the put is conditioned on no key under it being
// written since, so racing opens on several gateways cannot cross it.

// streamTTL is how long the streams of a gateway that died keep counting.
const streamTTL = 30 * time.Second

type streamLease struct {
	mu sync.Mutex
	id clientv3.LeaseID
}

func (s *Store) streamPrefix(account string) string { return s.p + "streams/" + account + "/" }

// streamLeaseID returns the lease of this process's stream keys, granting it
// (kept alive until the client closes, or granted again once lost).
func (s *Store) streamLeaseID(ctx context.Context) (clientv3.LeaseID, error) {
	l := s.streams
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id != 0 {
		return l.id, nil
	}
	resp, err := s.cli.Grant(ctx, int64(streamTTL/time.Second))
	if err != nil {
		return 0, fmt.Errorf("grant stream lease: %w", err)
	}
	ch, err := s.cli.KeepAlive(context.WithoutCancel(ctx), resp.ID)
	if err != nil {
		return 0, fmt.Errorf("keep stream lease alive: %w", err)
	}
	l.id = resp.ID
	go func() {
		for range ch {
		}
		l.mu.Lock()
		if l.id == resp.ID {
			l.id = 0
		}
		l.mu.Unlock()
	}()
	return l.id, nil
}

// OpenStream counts one more open event stream of account, within its
// max_event_streams (quotaExceeded, nothing written, when it has as many open);
// close ends it.
func (s *Store) OpenStream(ctx context.Context, account string, defaults Limits) (close func(), err error) {
	key := s.streamPrefix(account) + uuid.NewString()
	for attempt := 0; attempt <= quotaAttempts; attempt++ {
		u, err := s.readUsage(ctx, account)
		if err != nil {
			return nil, err
		}
		limit := u.overrides.Apply(defaults).MaxEventStreams
		if limit > 0 && u.streams >= limit {
			return nil, QuotaError("max_event_streams", limit, u.streams)
		}
		lease, err := s.streamLeaseID(ctx)
		if err != nil {
			return nil, err
		}
		var conds []clientv3.Cmp
		if limit > 0 {
			conds = append(conds, clientv3.Compare(clientv3.ModRevision(s.streamPrefix(account)), "<", u.rev+1).WithPrefix())
		}
		resp, err := s.cli.Txn(ctx).If(conds...).Then(clientv3.OpPut(key, "", clientv3.WithLease(lease))).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.streams.mu.Lock()
			if s.streams.id == lease {
				s.streams.id = 0
			}
			s.streams.mu.Unlock()
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open stream: %w", err)
		}
		if resp.Succeeded {
			var once sync.Once
			return func() {
				once.Do(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					s.cli.Delete(ctx, key) // else its lease takes it
				})
			}, nil
		}
	}
	return nil, fmt.Errorf("open stream: too many concurrent opens of account %s", account)
}
