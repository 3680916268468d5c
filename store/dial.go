package store

import (
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DialOptions name an etcd cluster to dial (the config's etcd block).
type DialOptions struct {
	Endpoints          []string
	DialTimeout        time.Duration
	Username, Password string
	Logger             *zap.Logger // nil: none
}

// Dial opens a store on the etcd cluster o names, under prefix; close releases
// its client. Like clientv3.New it connects lazily: Ping proves etcd answers.
func Dial(o DialOptions, prefix string) (s *Store, close func(), err error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: o.Endpoints, DialTimeout: o.DialTimeout,
		Username: o.Username, Password: o.Password, Logger: o.Logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %s: %w", strings.Join(o.Endpoints, ", "), err)
	}
	return New(cli, prefix), func() { cli.Close() }, nil
}
