package store

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Storage bytes held per account (docs/limits.md), counted like the bytes of job
// records (limits.go):
//
//   - usage/<account>/storage/<shard>: bytes counted, added to by gateways (a
//     temporary file's declared size when its link is asked for, or its size at
//     its first use) and by the dispatcher (a job's outputs when its result is
//     applied), in the transaction that writes the object's held record, with a
//     compare on the shard's revision;
//   - usage/<account>/storage_freed: bytes given back, by the janitor only;
//   - held/<account>/<object>: what one object counted and until when it is held
//     ({"bytes","expires","blob"}). It makes counting idempotent (an object is
//     counted once) and tells the janitor exactly what to give back, and which
//     blob to delete, when it expires;
//   - heldexp/<expires>/<account>/<object>: the same record under its expiry,
//     written and deleted with it, so the janitor reads only what has expired;
//   - tally/<job id>: a succeeded job whose outputs are still to be counted,
//     written with its terminal state (store.go) and deleted by the count, so
//     a dispatcher that stops in between leaves the count to the janitor.

// Held is what one object (a temporary file, a job's outputs) counts against its
// account's storage, until Expires.
type Held struct {
	Bytes   int64     `json:"bytes"`
	Expires time.Time `json:"expires"`
	// Blob is the file deleted when the record expires ("" for a job's
	// outputs: the output retention's sweep deletes them).
	Blob string `json:"blob,omitempty"`
}

// TmpObject and OutputsObject name a temporary file and a job's outputs as
// counted objects.
func TmpObject(id string) string        { return "tmp/" + id }
func OutputsObject(jobID string) string { return "job/" + jobID }

// storageShards spreads an account's counted-storage counter over this many keys.
const storageShards = 16

func (s *Store) storagePrefix(account string) string { return s.p + "usage/" + account + "/storage/" }
func (s *Store) storageFreedKey(account string) string {
	return s.p + "usage/" + account + "/storage_freed"
}
func (s *Store) storageKey(account, obj string) string {
	h := fnv.New32a()
	h.Write([]byte(obj))
	return s.storagePrefix(account) + strconv.Itoa(int(h.Sum32()%storageShards))
}

// HeldPrefix holds one record per counted object (held/<account>/<object>).
func (s *Store) HeldPrefix() string                 { return s.p + "held/" }
func (s *Store) heldKey(account, obj string) string { return s.HeldPrefix() + account + "/" + obj }

// heldExpPrefix indexes the held records by expiry.
func (s *Store) heldExpPrefix() string { return s.p + "heldexp/" }
func (s *Store) heldExpKey(account, obj string, exp time.Time) string {
	return s.heldExpPrefix() + expStamp(exp) + "/" + account + "/" + obj
}

// expStamp is a time as a fixed-width UTC stamp: the keys sort in time order.
func expStamp(t time.Time) string { return t.UTC().Format("20060102T150405.000000000Z") }

// heldIndexedKey holds when the last scan of held/ for records without their
// heldexp/ entry ended (indexHeld).
func (s *Store) heldIndexedKey() string { return s.p + "migrations/heldexp" }

// TallyPrefix holds the succeeded jobs whose outputs are still to be counted.
func (s *Store) TallyPrefix() string          { return s.p + "tally/" }
func (s *Store) tallyKey(jobID string) string { return s.TallyPrefix() + jobID }

// tallied tells whether j's terminal write leaves its outputs to count: it
// succeeded with outputs kept in the service's storage.
func tallied(j *mj.Job) bool {
	return j.Status == mj.StatusSucceeded && j.TotalOutputBytes-mj.SentOnlyBytes(j.Outputs) > 0
}

// storageRead is one reading of an account's storage counters.
type storageRead struct {
	shards         map[string]shardRead
	counted, freed int64
}

func readStorage(shards, freed *clientv3.GetResponse) storageRead {
	r := storageRead{shards: map[string]shardRead{}}
	for _, kv := range shards.Kvs {
		v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		r.shards[string(kv.Key)] = shardRead{value: v, modRev: kv.ModRevision}
		r.counted += v
	}
	r.freed, _ = counter(freed)
	return r
}

func (r storageRead) held() int64 { return max(r.counted-r.freed, 0) }

// CheckStorage refuses, with quotaExceeded, when more bytes would take the
// account past its max_storage_bytes, or it has reached it already.
func (s *Store) CheckStorage(ctx context.Context, account string, more int64, defaults Limits) error {
	u, err := s.readUsage(ctx, account)
	if err != nil {
		return err
	}
	return storageWithin(u.overrides.Apply(defaults), u, more)
}

func storageWithin(l Limits, u usageRead, more int64) error {
	held := u.storage.held()
	if l.MaxStorageBytes > 0 && (held >= l.MaxStorageBytes || held+more > l.MaxStorageBytes) {
		return QuotaError("max_storage_bytes", l.MaxStorageBytes, held)
	}
	return nil
}

// HeldObject returns what obj of account counted; ok is false when it counted
// nothing yet.
func (s *Store) HeldObject(ctx context.Context, account, obj string) (h Held, ok bool, err error) {
	resp, err := s.cli.Get(ctx, s.heldKey(account, obj))
	if err != nil {
		return Held{}, false, fmt.Errorf("read held storage: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Held{}, false, nil
	}
	err = json.Unmarshal(resp.Kvs[0].Value, &h)
	return h, err == nil, err
}

// CountStorage counts h against account's storage, once per obj: when obj is
// counted already it returns that record and counted false. within refuses, with
// quotaExceeded and nothing written, what would take the account past its
// max_storage_bytes; without it the bytes count whatever the use (a finished
// job's outputs: a job is never failed for its account's quota).
func (s *Store) CountStorage(ctx context.Context, account, obj string, h Held, defaults Limits, within bool) (_ Held, counted bool, _ error) {
	return s.countStorage(ctx, account, obj, h, defaults, within, nil)
}

// CountOutputs counts a succeeded job's outputs, h, against its account's
// storage whatever the account holds, once, and settles its tally/ entry in the
// same transaction (or on its own, when they were counted already).
func (s *Store) CountOutputs(ctx context.Context, j *mj.Job, h Held) (counted bool, err error) {
	settle := clientv3.OpDelete(s.tallyKey(j.ID))
	_, counted, err = s.countStorage(ctx, j.AccountID, OutputsObject(j.ID), h, Limits{}, false, &settle)
	return counted, err
}

func (s *Store) countStorage(ctx context.Context, account, obj string, h Held, defaults Limits, within bool, settle *clientv3.Op) (_ Held, counted bool, _ error) {
	hk, sk, ek := s.heldKey(account, obj), s.storageKey(account, obj), s.heldExpKey(account, obj, h.Expires)
	rec, err := json.Marshal(h)
	if err != nil {
		return Held{}, false, err
	}
	for attempt := 0; attempt <= quotaAttempts; attempt++ {
		if prior, ok, err := s.HeldObject(ctx, account, obj); err != nil || ok {
			if err == nil && settle != nil {
				_, err = s.cli.Txn(ctx).Then(*settle).Commit()
			}
			return prior, false, err
		}
		u, err := s.readUsage(ctx, account)
		if err != nil {
			return Held{}, false, err
		}
		if within {
			if err := storageWithin(u.overrides.Apply(defaults), u, h.Bytes); err != nil {
				return Held{}, false, err
			}
		}
		shard := u.storage.shards[sk]
		ops := []clientv3.Op{
			clientv3.OpPut(sk, strconv.FormatInt(shard.value+h.Bytes, 10)),
			clientv3.OpPut(hk, string(rec)),
			clientv3.OpPut(ek, string(rec)),
		}
		if settle != nil {
			ops = append(ops, *settle)
		}
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(hk), "=", 0),
			clientv3.Compare(clientv3.ModRevision(sk), "=", shard.modRev),
		).Then(ops...).Commit()
		if err != nil {
			return Held{}, false, fmt.Errorf("count storage: %w", err)
		}
		if resp.Succeeded {
			return h, true, nil
		}
	}
	return Held{}, false, fmt.Errorf("count storage: too many concurrent updates of account %s", account)
}

// Tallies lists the succeeded jobs whose outputs are still to be counted, in id
// order after after ("": from the first), at most limit.
func (s *Store) Tallies(ctx context.Context, after string, limit int) ([]string, error) {
	from := s.TallyPrefix()
	if after != "" {
		from = s.tallyKey(after) + "\x00"
	}
	resp, err := s.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.TallyPrefix())), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("list outputs to count: %w", err)
	}
	ids := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		ids[i] = string(kv.Key[len(s.TallyPrefix()):])
	}
	return ids, nil
}

// DropTally deletes a job's tally/ entry without counting (its job is gone).
func (s *Store) DropTally(ctx context.Context, jobID string) error {
	_, err := s.cli.Delete(ctx, s.tallyKey(jobID))
	return err
}

// heldPage is how many held records one read of ReleaseExpired takes.
const heldPage = 500

// heldScanPage is how many held records one sweep's index scan reads (one page
// a sweep: a scan of any size costs each sweep the same).
const heldScanPage = 1000

// heldScanEvery is how often the index scan goes over held/ again, to index
// records written without their heldexp/ entry (by a version before the index,
// still running during an upgrade).
const heldScanEvery = 24 * time.Hour

// heldScanQuiet ends the scans: once a whole scan that began this long after
// the last scan that indexed a record finds nothing to index, no version before
// the index is taken to be running any more, and held/ is not scanned again
// (docs/limits.md says how to scan again after a downgrade).
const heldScanQuiet = 7 * 24 * time.Hour

// heldScanKey holds the index scan's state (heldScan); heldIndexedKey, when
// the last scan ended, which versions with a whole-held/ scan read too.
func (s *Store) heldScanKey() string { return s.p + "migrations/heldexp_scan" }

// heldScan is where the index scan stands.
type heldScan struct {
	// Cursor is the held/ key the scan in progress goes on from ("": none).
	Cursor string `json:"cursor,omitempty"`
	// Started is when the scan in progress began.
	Started time.Time `json:"started,omitzero"`
	// Found is when a scan last indexed a record (at first, the first scan's start).
	Found time.Time `json:"found,omitzero"`
	// Done: no version before the index writes any more; no scan is needed.
	Done bool `json:"done,omitempty"`
}

// ReleaseExpired gives back the storage of the objects whose records expired
// before now: it deletes each one's blob with del (which must treat a blob
// already gone as deleted), then its record, adding its bytes to the account's
// freed counter in the same transaction. A record whose blob could not be
// deleted stays for the next sweep. It reads only the expired part of the
// expiry index (heldexp/). Then it indexes one page of held/ when a scan for
// records written without their entry is due (indexHeld): releasing never
// waits for the scan, whatever held/ holds. The janitor is the only caller. It
// returns how many records it released and the first error.
func (s *Store) ReleaseExpired(ctx context.Context, now time.Time, del func(blob string) error) (int, error) {
	n, first := s.releaseIndexed(ctx, now, del)
	if ctx.Err() == nil {
		first = cmp(first, s.indexHeld(ctx, now))
	}
	return n, first
}

func (s *Store) releaseIndexed(ctx context.Context, now time.Time, del func(blob string) error) (int, error) {
	prefix := s.heldExpPrefix()
	from, end := prefix, prefix+expStamp(now)
	n := 0
	var first error
	for {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(heldPage))
		if err != nil {
			return n, cmp(first, fmt.Errorf("list expired storage: %w", err))
		}
		for _, kv := range resp.Kvs {
			// heldexp/<stamp>/<account>/<object>
			_, rest, _ := strings.Cut(string(kv.Key[len(prefix):]), "/")
			account, obj, _ := strings.Cut(rest, "/")
			var h Held
			json.Unmarshal(kv.Value, &h) // a damaged record is released with 0 bytes
			if h.Blob != "" {
				if err := del(h.Blob); err != nil {
					first = cmp(first, err)
					continue
				}
			}
			released, err := s.release(ctx, account, kv, s.heldKey(account, obj), h.Bytes)
			if err != nil {
				first = cmp(first, err)
				continue
			}
			if released {
				n++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, first
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// heldGetOps is how many reads one multi-get transaction of indexHeld holds
// (etcd allows 128 operations in a transaction by default).
const heldGetOps = 100

// indexHeld takes the index scan one page further: it gives the held records of
// the page without their heldexp/ entry one, and writes nothing for those that
// have it (read first, a multi-get per heldGetOps records), so a scan of records
// all indexed costs one write per page, for its cursor. A scan starts when the
// last one ended heldScanEvery before now, until one finds that no version
// before the index can be writing any more (heldScanQuiet).
func (s *Store) indexHeld(ctx context.Context, now time.Time) error {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.heldIndexedKey()), clientv3.OpGet(s.heldScanKey())).Commit()
	if err != nil {
		return fmt.Errorf("read held storage scan: %w", err)
	}
	var st heldScan
	stateRev := int64(0)
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		stateRev = kvs[0].ModRevision
		json.Unmarshal(kvs[0].Value, &st) // damaged: scanned as if new
	}
	if st.Done {
		return nil
	}
	if st.Cursor == "" {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if at, err := time.Parse(time.RFC3339, string(kvs[0].Value)); err == nil && now.Sub(at) < heldScanEvery {
				return nil
			}
		}
		st.Cursor, st.Started = s.HeldPrefix(), now
		if st.Found.IsZero() {
			st.Found = now
		}
	}
	page, err := s.cli.Get(ctx, st.Cursor, clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.HeldPrefix())), clientv3.WithLimit(heldScanPage))
	if err != nil {
		return fmt.Errorf("list held storage: %w", err)
	}
	entries := make([]string, len(page.Kvs))
	for i, kv := range page.Kvs {
		account, obj, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), s.HeldPrefix()), "/")
		var h Held
		json.Unmarshal(kv.Value, &h) // a damaged record: indexed as expired long ago
		entries[i] = s.heldExpKey(account, obj, h.Expires)
	}
	for i := 0; i < len(entries); i += heldGetOps {
		chunk := entries[i:min(i+heldGetOps, len(entries))]
		gets := make([]clientv3.Op, len(chunk))
		for j, ek := range chunk {
			gets[j] = clientv3.OpGet(ek, clientv3.WithCountOnly())
		}
		has, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return fmt.Errorf("read held storage index: %w", err)
		}
		for j, ek := range chunk {
			if has.Responses[j].GetResponseRange().Count > 0 {
				continue
			}
			kv := page.Kvs[i+j]
			// Unless it was given its entry, or changed (was released), since it was read.
			put, err := s.cli.Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
				clientv3.Compare(clientv3.CreateRevision(ek), "=", 0),
			).Then(clientv3.OpPut(ek, string(kv.Value))).Commit()
			if err != nil {
				return fmt.Errorf("index held storage: %w", err)
			}
			if put.Succeeded {
				st.Found = now // a version before the index wrote it
			}
		}
	}
	ops := []clientv3.Op(nil)
	if page.More && len(page.Kvs) > 0 {
		st.Cursor = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	} else {
		st.Done = st.Started.Sub(st.Found) >= heldScanQuiet // nothing found since, this scan included
		st.Cursor, st.Started = "", time.Time{}
		ops = append(ops, clientv3.OpPut(s.heldIndexedKey(), now.UTC().Format(time.RFC3339)))
	}
	b, _ := json.Marshal(st)
	// A janitor of another leader that moved the scan on meanwhile wins.
	if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.heldScanKey()), "=", stateRev)).
		Then(append(ops, clientv3.OpPut(s.heldScanKey(), string(b)))...).Commit(); err != nil {
		return fmt.Errorf("record held storage scan: %w", err)
	}
	return nil
}

// cmp keeps the first error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// release deletes an expiry entry as read (idx) and its held record, and adds
// the record's bytes to the account's freed counter, if the record is still the
// one the entry indexes. An entry whose record is gone or different (released
// by a version before the index) is deleted without giving anything back: that
// was done. It reports whether it gave the bytes back.
func (s *Store) release(ctx context.Context, account string, idx *mvccpb.KeyValue, heldKey string, bytes int64) (bool, error) {
	fk := s.storageFreedKey(account)
	for attempt := 0; attempt <= quotaAttempts; attempt++ {
		fr, err := s.cli.Get(ctx, fk)
		if err != nil {
			return false, fmt.Errorf("release storage: %w", err)
		}
		freed, rev := counter(fr)
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(string(idx.Key)), "=", idx.ModRevision),
			clientv3.Compare(clientv3.Value(heldKey), "=", string(idx.Value)),
			clientv3.Compare(clientv3.ModRevision(fk), "=", rev),
		).Then(
			clientv3.OpDelete(string(idx.Key)),
			clientv3.OpDelete(heldKey),
			clientv3.OpPut(fk, strconv.FormatInt(freed+bytes, 10)),
		).Else(
			clientv3.OpGet(string(idx.Key), clientv3.WithCountOnly()),
			clientv3.OpGet(heldKey),
		).Commit()
		if err != nil {
			return false, fmt.Errorf("release storage: %w", err)
		}
		if resp.Succeeded {
			return true, nil
		}
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return false, nil // released meanwhile
		}
		if h := resp.Responses[1].GetResponseRange().Kvs; len(h) == 0 || string(h[0].Value) != string(idx.Value) {
			_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(idx.Key)), "=", idx.ModRevision)).
				Then(clientv3.OpDelete(string(idx.Key))).Commit()
			return false, err
		}
	}
	return false, fmt.Errorf("release storage: too many concurrent updates of account %s", account)
}

// ClaimTmpFile counts a temporary file whose size was not declared, at its first
// use as an input or at the janitor's sweep (docs/limits.md), once: size is what
// the store holds now, expires when its record (and the file) goes. An error
// tells the caller to delete the file and refuse it: payloadTooLarge when it is
// over maxUpload or larger than what it counted before (uploaded again since),
// quotaExceeded when it would take the account past max_storage_bytes.
func (s *Store) ClaimTmpFile(ctx context.Context, account, id, key string, size int64, expires time.Time, maxUpload int64, defaults Limits) error {
	h, ok, err := s.HeldObject(ctx, account, TmpObject(id))
	switch {
	case err != nil:
		return err
	case ok && size > h.Bytes:
		return mj.Errorf(mj.EPayloadTooLarge, "the temporary file is %d bytes, more than the %d it was counted for (uploaded again since)", size, h.Bytes)
	case ok:
		return nil
	case maxUpload > 0 && size > maxUpload:
		return &mj.Error{Code: mj.EPayloadTooLarge, Message: fmt.Sprintf("the temporary file is %d bytes, over max_upload_bytes (%d)", size, maxUpload),
			Details: map[string]string{"limit": "max_upload_bytes", "value": strconv.FormatInt(maxUpload, 10), "use": strconv.FormatInt(size, 10)}}
	}
	_, _, err = s.CountStorage(ctx, account, TmpObject(id), Held{Bytes: size, Expires: expires, Blob: key}, defaults, true)
	return err
}

// Deletable tells whether err from ClaimTmpFile refuses the file (delete it),
// rather than saying the store could not answer.
func Deletable(err error) bool {
	c := mj.ErrorCode(err)
	return c == mj.EPayloadTooLarge || c == mj.EQuotaExceeded
}
