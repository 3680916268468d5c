package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Storage held: a count that would cross max_storage_bytes is refused naming it,
// with nothing written; an object counts once; outputs count whatever the use
// (a finished job is never lost to a quota) and then the account's creates are
// refused; the janitor's release gives the bytes back and deletes the files.
func TestStorageHeld(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	l := store.Limits{MaxStorageBytes: 1000}
	tmp := func(id string, n int64, exp time.Time) store.Held {
		return store.Held{Bytes: n, Expires: exp, Blob: "tmp/a/" + id}
	}
	if _, counted, err := s.CountStorage(ctx, "a", store.TmpObject("f1"), tmp("f1", 600, now.Add(time.Hour)), l, true); err != nil || !counted {
		t.Fatalf("count 600 of 1000: %v %v", counted, err)
	}
	// Counted once: again, nothing is added.
	if h, counted, err := s.CountStorage(ctx, "a", store.TmpObject("f1"), tmp("f1", 600, now), l, true); err != nil || counted || h.Bytes != 600 {
		t.Fatalf("second count of f1: %+v %v %v", h, counted, err)
	}
	keys, rev := etcdState(t, e.Client)
	_, _, err := s.CountStorage(ctx, "a", store.TmpObject("f2"), tmp("f2", 401, now.Add(time.Hour)), l, true)
	wantQuota(t, err, "max_storage_bytes", "1000", "600")
	wantQuota(t, s.CheckStorage(ctx, "a", 401, l), "max_storage_bytes", "1000", "600")
	if k, r := etcdState(t, e.Client); k != keys || r != rev {
		t.Fatalf("a refused count wrote to etcd: keys %d -> %d, revision %d -> %d", keys, k, rev, r)
	}
	if err := s.CheckStorage(ctx, "a", 400, l); err != nil {
		t.Fatalf("400 more fits: %v", err)
	}
	// A job's outputs count over the limit; then creates are refused.
	if _, counted, err := s.CountStorage(ctx, "a", store.OutputsObject("j1"), store.Held{Bytes: 700, Expires: now.Add(-time.Second)}, l, false); err != nil || !counted {
		t.Fatalf("outputs over the limit: %v %v", counted, err)
	}
	_, u, _, _ := s.AccountLimits(ctx, "a", l)
	if u.StorageBytes != 1300 {
		t.Fatalf("storage held %d; want 1300", u.StorageBytes)
	}
	keys, rev = etcdState(t, e.Client)
	_, err = s.CreateJobWithin(ctx, newJob("a", now), nil, l)
	wantQuota(t, err, "max_storage_bytes", "1000", "1300")
	wantQuota(t, s.CheckStorage(ctx, "a", 0, l), "max_storage_bytes", "1000", "1300")
	if k, r := etcdState(t, e.Client); k != keys || r != rev {
		t.Fatalf("a refused create wrote to etcd: keys %d -> %d, revision %d -> %d", keys, k, rev, r)
	}
	if _, err := s.CreateJobWithin(ctx, newJob("b", now), nil, l); err != nil {
		t.Fatalf("another account's create: %v", err)
	}

	// The release: the expired outputs go (no file of theirs to delete), the
	// temporary file stays until it expires, then its file is deleted too.
	var deleted []string
	del := func(b string) error { deleted = append(deleted, b); return nil }
	if n, err := s.ReleaseExpired(ctx, now, del); n != 1 || err != nil || len(deleted) != 0 {
		t.Fatalf("release at now: %d %v, deleted %v", n, err, deleted)
	}
	if _, u, _, _ = s.AccountLimits(ctx, "a", l); u.StorageBytes != 600 {
		t.Fatalf("storage held after the outputs expired: %d; want 600", u.StorageBytes)
	}
	if _, err := s.CreateJobWithin(ctx, newJob("a", now.Add(time.Millisecond)), nil, l); err != nil {
		t.Fatalf("create under the limit again: %v", err)
	}
	if n, err := s.ReleaseExpired(ctx, now.Add(2*time.Hour), del); n != 1 || err != nil || len(deleted) != 1 || deleted[0] != "tmp/a/f1" {
		t.Fatalf("release later: %d %v, deleted %v", n, err, deleted)
	}
	if _, u, _, _ = s.AccountLimits(ctx, "a", l); u.StorageBytes != 0 {
		t.Fatalf("storage held after every release: %d", u.StorageBytes)
	}
	if r, _ := e.Client.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly()); r != nil {
		for _, kv := range r.Kvs {
			if string(kv.Key) >= s.HeldPrefix() && string(kv.Key) < s.HeldPrefix()+"\xff" {
				t.Fatalf("a held record is left: %s", kv.Key)
			}
		}
	}
}

// A temporary file claimed at its first use: over max_upload_bytes or over the
// account's storage it is refused (the caller deletes it), else counted once;
// uploaded again larger, refused.
func TestClaimTmpFile(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	l := store.Limits{MaxStorageBytes: 1000}
	keys, rev := etcdState(t, e.Client)
	err := s.ClaimTmpFile(ctx, "a", "f1", "tmp/a/f1", 101, exp, 100, l)
	if mj.ErrorCode(err) != mj.EPayloadTooLarge || !store.Deletable(err) {
		t.Fatalf("over max_upload_bytes: %v", err)
	}
	err = s.ClaimTmpFile(ctx, "a", "f1", "tmp/a/f1", 1001, exp, 0, l)
	wantQuota(t, err, "max_storage_bytes", "1000", "0")
	if k, r := etcdState(t, e.Client); k != keys || r != rev {
		t.Fatalf("a refused claim wrote to etcd: keys %d -> %d, revision %d -> %d", keys, k, rev, r)
	}
	for range 2 {
		if err := s.ClaimTmpFile(ctx, "a", "f1", "tmp/a/f1", 500, exp, 0, l); err != nil {
			t.Fatal(err)
		}
	}
	if _, u, _, _ := s.AccountLimits(ctx, "a", l); u.StorageBytes != 500 {
		t.Fatalf("claimed twice: %d held; want 500", u.StorageBytes)
	}
	if err := s.ClaimTmpFile(ctx, "a", "f1", "tmp/a/f1", 501, exp, 0, l); !store.Deletable(err) {
		t.Fatalf("uploaded again larger: %v", err)
	}
}

// Event streams open: the one past max_event_streams is refused naming it and
// writes nothing; closing one makes room; the streams of a process that died
// stop counting when its lease expires.
func TestEventStreamsOpen(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	l := store.Limits{MaxEventStreams: 2}
	var closers []func()
	for range 2 {
		c, err := s.OpenStream(ctx, "a", l)
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, c)
	}
	keys, rev := etcdState(t, e.Client)
	_, err := s.OpenStream(ctx, "a", l)
	wantQuota(t, err, "max_event_streams", "2", "2")
	if k, r := etcdState(t, e.Client); k != keys || r != rev {
		t.Fatalf("a refused open wrote to etcd: keys %d -> %d, revision %d -> %d", keys, k, rev, r)
	}
	if _, u, _, _ := s.AccountLimits(ctx, "a", l); u.EventStreams != 2 {
		t.Fatalf("event streams %d; want 2", u.EventStreams)
	}
	if c, err := s.OpenStream(ctx, "b", l); err != nil {
		t.Fatalf("another account: %v", err)
	} else {
		c()
	}
	closers[0]()
	closers[0]() // once only
	c, err := s.OpenStream(ctx, "a", l)
	if err != nil {
		t.Fatalf("after one closed: %v", err)
	}
	c()

	// Another process (its own client) opens one and dies without closing it.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	other := store.New(cli, "/test/")
	if _, err := other.OpenStream(ctx, "a", l); err != nil {
		t.Fatal(err)
	}
	_, err = s.OpenStream(ctx, "a", l)
	wantQuota(t, err, "max_event_streams", "2", "2")
	cli.Close()
	testenv.Eventually(t, 60*time.Second, "the dead process's stream stops counting", func() bool {
		_, u, _, _ := s.AccountLimits(ctx, "a", l)
		return u.EventStreams == 1
	})
}

// max_input_bytes travels on the job record, the account's own value first.
func TestMaxInputBytesOnTheJob(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	l := store.Limits{MaxInputBytes: 1 << 20}
	j, err := s.CreateJobWithin(ctx, newJob("a", now), nil, l)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.Job(ctx, j.ID)
	if got.MaxInputBytes != 1<<20 {
		t.Fatalf("max_input_bytes on the job: %d", got.MaxInputBytes)
	}
	two := int64(2 << 20)
	if err := s.SetAccountSchedule(ctx, "a", store.Schedule{LimitOverrides: store.LimitOverrides{MaxInputBytes: &two}}); err != nil {
		t.Fatal(err)
	}
	j, _ = s.CreateJobWithin(ctx, newJob("a", now.Add(time.Millisecond)), nil, l)
	got, _ = s.Job(ctx, j.ID)
	if got.MaxInputBytes != two || got.RecordBytes <= 0 {
		t.Fatalf("the account's own max_input_bytes: %d (record %d)", got.MaxInputBytes, got.RecordBytes)
	}
}

// The janitor's release reads the expiry index (heldexp/), written and deleted
// with each held record, and only its expired part. Records written without
// their entry (by a version before the index) are indexed by the first sweep,
// and by one a day after; an entry whose record a version before the index
// released gives nothing back twice.
func TestReleaseExpiredByIndex(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	count := func(prefix string) int64 {
		r, err := e.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	held := func() int64 {
		_, u, _, _ := s.AccountLimits(ctx, "a", store.Limits{})
		return u.StorageBytes
	}
	none := func(string) error { return nil }
	idx := strings.TrimSuffix(s.HeldPrefix(), "held/") + "heldexp/"
	unindex := func(obj string) { // as a version before the index counted it
		r, err := e.Client.Get(ctx, idx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Kvs {
			if strings.HasSuffix(string(kv.Key), "/"+obj) {
				e.Client.Delete(ctx, string(kv.Key))
			}
		}
	}
	for obj, h := range map[string]store.Held{
		"new0": {Bytes: 100, Expires: now.Add(-time.Minute)}, "new1": {Bytes: 100, Expires: now.Add(time.Hour)},
		"legacy0": {Bytes: 10, Expires: now.Add(-time.Hour)}, "legacy1": {Bytes: 20, Expires: now.Add(2 * time.Hour)},
	} {
		if _, _, err := s.CountStorage(ctx, "a", store.OutputsObject(obj), h, store.Limits{}, false); err != nil {
			t.Fatal(err)
		}
	}
	unindex("legacy0")
	unindex("legacy1")
	if count(idx) != 2 || held() != 230 {
		t.Fatalf("setup: %d index entries, %d held", count(idx), held())
	}

	// The first sweep releases what is indexed, then indexes what held/ holds
	// unindexed, which the next sweep releases.
	if n, err := s.ReleaseExpired(ctx, now, none); n != 1 || err != nil {
		t.Fatalf("first sweep released %d (%v); want new0", n, err)
	}
	if n, err := s.ReleaseExpired(ctx, now, none); n != 1 || err != nil {
		t.Fatalf("second sweep released %d (%v); want legacy0", n, err)
	}
	if held() != 120 || count(s.HeldPrefix()) != 2 || count(idx) != 2 {
		t.Fatalf("after the first sweeps: held %d, %d records, %d index entries", held(), count(s.HeldPrefix()), count(idx))
	}
	// A record counted without its entry (an older gateway, mid-upgrade) is seen
	// by the scan a day later, not by the sweeps in between.
	if _, _, err := s.CountStorage(ctx, "a", store.TmpObject("late"), store.Held{Bytes: 5, Expires: now.Add(-time.Minute)}, store.Limits{}, false); err != nil {
		t.Fatal(err)
	}
	unindex("late")
	if n, err := s.ReleaseExpired(ctx, now.Add(time.Minute), none); n != 0 || err != nil {
		t.Fatalf("third sweep released %d (%v); want none", n, err)
	}
	// legacy1's record is released the old way (deleted, its bytes given back)
	// by a dispatcher of the version before: its entry gives nothing back again.
	e.Client.Delete(ctx, s.HeldPrefix()+"a/job/legacy1")
	freedKey := strings.TrimSuffix(s.HeldPrefix(), "held/") + "usage/a/storage_freed"
	r, _ := e.Client.Get(ctx, freedKey)
	freed := int64(0)
	if len(r.Kvs) > 0 {
		fmt.Sscan(string(r.Kvs[0].Value), &freed)
	}
	e.Client.Put(ctx, freedKey, fmt.Sprint(freed+20))
	if held() != 105 {
		t.Fatalf("after the old release: held %d; want 105", held())
	}
	day := now.Add(25 * time.Hour)
	if n, err := s.ReleaseExpired(ctx, day, none); n != 1 || err != nil {
		t.Fatalf("sweep a day later released %d (%v); want new1", n, err)
	}
	if n, err := s.ReleaseExpired(ctx, day.Add(time.Minute), none); n != 1 || err != nil {
		t.Fatalf("the sweep after released %d (%v); want late", n, err)
	}
	if held() != 0 || count(idx) != 0 || count(s.HeldPrefix()) != 0 {
		t.Fatalf("left: held %d, %d index entries, %d records", held(), count(idx), count(s.HeldPrefix()))
	}
}

// A succeeded job's terminal write leaves its outputs to count (tally/); the count
// settles it, once; a job that did not succeed, or kept nothing, leaves none.
func TestOutputsTally(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now().UTC()
	finish := func(st mj.Status, bytes int64) *mj.Job {
		j := newJob("a", now)
		now = now.Add(time.Millisecond)
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		nj, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
			fin := time.Now().UTC()
			j.Status, j.FinishedAt, j.TotalOutputBytes = st, &fin, bytes
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return nj
	}
	ok := finish(mj.StatusSucceeded, 300)
	finish(mj.StatusFailed, 300)
	finish(mj.StatusSucceeded, 0)
	ids, err := s.Tallies(ctx, "", 10)
	if err != nil || len(ids) != 1 || ids[0] != ok.ID {
		t.Fatalf("tallies %v %v; want only %s", ids, err, ok.ID)
	}
	h := store.Held{Bytes: 300, Expires: now.Add(time.Hour)}
	for i, want := range []bool{true, false} {
		if counted, err := s.CountOutputs(ctx, ok, h); err != nil || counted != want {
			t.Fatalf("count %d: %v %v", i, counted, err)
		}
		if ids, _ := s.Tallies(ctx, "", 10); len(ids) != 0 {
			t.Fatalf("count %d left %v", i, ids)
		}
	}
	// Counted already, a tally left behind (a count that raced) is settled too.
	if _, err := e.Client.Put(ctx, s.TallyPrefix()+ok.ID, ""); err != nil {
		t.Fatal(err)
	}
	if counted, err := s.CountOutputs(ctx, ok, h); err != nil || counted {
		t.Fatalf("again: %v %v", counted, err)
	}
	if ids, _ := s.Tallies(ctx, "", 10); len(ids) != 0 {
		t.Fatalf("left %v", ids)
	}
	if _, u, _, _ := s.AccountLimits(ctx, "a", store.Limits{}); u.StorageBytes != 300 {
		t.Fatalf("held %d; want 300", u.StorageBytes)
	}
}
