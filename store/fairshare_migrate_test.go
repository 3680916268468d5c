package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// One legacy queue key whose job record cannot be decoded does not keep the
// keys after it from moving: they move, it stays, and the error names it.
func TestMigrateQueueKeysGoesOnPastAnUndecodableJob(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	cli, p := s.Client(), "/test/"
	base := time.Now().Add(-time.Minute)
	legacy := func(at time.Time, id string) string {
		return fmt.Sprintf("%squeue/cpu/%019d_%s", p, at.UnixNano(), id)
	}
	var keys []string
	for i := range 3 {
		j := newJob("acct", base.Add(time.Duration(i)*time.Second))
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		if i == 0 { // its record damaged: a field's JSON type changed
			if _, err := cli.Put(ctx, p+"jobs/"+j.ID, `{"id":"`+j.ID+`","attempt":"1"}`); err != nil {
				t.Fatal(err)
			}
		}
		k := legacy(j.QueuedAt, j.ID)
		if _, err := cli.Put(ctx, k, j.ID); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	n, err := s.MigrateQueueKeys(ctx, keys)
	if err == nil || !strings.Contains(err.Error(), keys[0]) {
		t.Fatalf("error %v: want one naming %s", err, keys[0])
	}
	if n != 2 {
		t.Fatalf("moved %d keys, want the 2 readable ones", n)
	}
	for i, k := range keys {
		resp, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if stays := i == 0; (len(resp.Kvs) == 1) != stays {
			t.Errorf("legacy key %d: present %v, want %v", i, len(resp.Kvs) == 1, stays)
		}
	}
}
