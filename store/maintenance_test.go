package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestShouldDefrag(t *testing.T) {
	const MiB = 1 << 20
	p := store.DefragPolicy{FreeRatio: 0.5, MinBytes: 64 * MiB}
	cases := []struct {
		name          string
		size, inUse   int64
		noSpace, want bool
	}{
		{"big and mostly free", 1024 * MiB, 100 * MiB, false, true},
		{"exactly the ratio", 200 * MiB, 100 * MiB, false, true},
		{"just under the ratio", 200 * MiB, 101 * MiB, false, false},
		{"big but mostly in use", 1024 * MiB, 900 * MiB, false, false},
		{"mostly free but small", 32 * MiB, 1 * MiB, false, false},
		{"exactly the minimum size", 64 * MiB, 1 * MiB, false, true},
		{"no free space", 128 * MiB, 128 * MiB, false, false},
		{"in use above size", 128 * MiB, 129 * MiB, true, false},
		{"in-use size unknown (etcd < 3.4)", 1024 * MiB, 0, false, false},
		{"empty", 0, 0, false, false},
		// NOSPACE: writes are refused anyway; any real gain counts.
		{"nospace, little ratio but min bytes free", 2048 * MiB, 1900 * MiB, true, true},
		{"nospace, small but mostly free", 32 * MiB, 1 * MiB, true, true},
		{"nospace, nothing worth it", 2048 * MiB, 2047 * MiB, true, false},
	}
	for _, c := range cases {
		if got := store.ShouldDefrag(c.size, c.inUse, c.noSpace, p); got != c.want {
			t.Errorf("%s: ShouldDefrag(%d, %d, nospace=%v) = %v, want %v", c.name, c.size, c.inUse, c.noSpace, got, c.want)
		}
	}
}

// TestEmbeddedAutoCompaction: the embedded server compacts its history by itself
// (etcd's default keeps every revision forever). With a retention under an hour
// etcd's periodic compactor compacts every retention period to the revision of one
// retention period ago.
func TestEmbeddedAutoCompaction(t *testing.T) {
	_, e := testenv.EtcdWith(t, store.EmbeddedOptions{CompactionRetention: time.Second})
	ctx := context.Background()
	cli := e.Client
	first, err := cli.Put(ctx, "/test/compact/k", "v0")
	if err != nil {
		t.Fatal(err)
	}
	old := first.Header.Revision
	for i := 1; i <= 10; i++ {
		if _, err := cli.Put(ctx, "/test/compact/k", fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Right after the writes the old revision is still there.
	if resp, err := cli.Get(ctx, "/test/compact/k", clientv3.WithRev(old)); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v0" {
		t.Fatalf("Get at revision %d right away = %v, %v; want v0", old, resp, err)
	}
	var lastErr error
	testenv.Eventually(t, 20*time.Second, "the periodic compactor to compact past revision "+fmt.Sprint(old), func() bool {
		_, lastErr = cli.Get(ctx, "/test/compact/k", clientv3.WithRev(old))
		return errors.Is(lastErr, rpctypes.ErrCompacted)
	})
	// The latest value is untouched.
	resp, err := cli.Get(ctx, "/test/compact/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v10" {
		t.Fatalf("Get latest = %v, %v; want v10", resp, err)
	}
}
