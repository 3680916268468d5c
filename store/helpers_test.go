package store_test

import (
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func clientv3WithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }
func contains(s, sub string) bool           { return strings.Contains(s, sub) }
