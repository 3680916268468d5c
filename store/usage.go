package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Usage metering (docs/usage.md): what each job consumed, summed per account, per
// UTC day and per pool, in counters meter/<account>/<YYYY-MM-DD>/<pool>/<shard>.
// A job is added to its day's counter in the transaction that makes it terminal
// with its result (UpdateJob, UpdateJobs): that write happens once per job (a
// compare-and-swap on the job's revision, and a terminal job never changes
// status again), so a replayed event or a restart cannot count a job twice, and
// no job is counted without its result being stored. A job cancelled while it
// ran is counted by the cancel (its wall time); a report of its runner that
// arrives later adds what it reports beyond that to the same counter, in the
// write that stores it on the job, without counting the job again
// (meterDelta). A shard of the counter is
// chosen by the job's id, so jobs of one account ending at once rarely contend.
// Counters older than usage.retention_days are deleted by the janitor (SweepUsage).

// meterShards spreads an account's counter of one day and pool over this many keys.
const meterShards = 4

// DayLayout is the layout of a usage day (UTC).
const DayLayout = "2006-01-02"

// meterRecord is a counter's value: times in milliseconds, so sums are exact.
type meterRecord struct {
	Jobs        int64 `json:"jobs"`
	WallMS      int64 `json:"wall_ms"`
	CPUMS       int64 `json:"cpu_ms"`
	GPUMS       int64 `json:"gpu_ms"`
	InputBytes  int64 `json:"input_bytes"`
	OutputBytes int64 `json:"output_bytes"`
}

func ms(s float64) int64 { return int64(mj.Seconds(s)*1000 + 0.5) }

func (m meterRecord) add(u mj.Usage) meterRecord {
	m.Jobs++
	m.WallMS += ms(u.WallSeconds)
	m.CPUMS += ms(u.CPUSeconds)
	m.GPUMS += ms(u.GPUSeconds)
	m.InputBytes += u.InputBytes
	m.OutputBytes += u.OutputBytes
	return m
}

func (m meterRecord) plus(o meterRecord) meterRecord {
	return meterRecord{Jobs: m.Jobs + o.Jobs, WallMS: m.WallMS + o.WallMS, CPUMS: m.CPUMS + o.CPUMS, GPUMS: m.GPUMS + o.GPUMS,
		InputBytes: m.InputBytes + o.InputBytes, OutputBytes: m.OutputBytes + o.OutputBytes}
}

// UsageTotals are summed figures of jobs (GET /api/usage).
type UsageTotals struct {
	Jobs        int64   `json:"jobs"`
	WallSeconds float64 `json:"wall_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	GPUSeconds  float64 `json:"gpu_seconds"`
	InputBytes  int64   `json:"input_bytes"`
	OutputBytes int64   `json:"output_bytes"`
}

func (m meterRecord) totals() UsageTotals {
	return UsageTotals{Jobs: m.Jobs, WallSeconds: float64(m.WallMS) / 1000, CPUSeconds: float64(m.CPUMS) / 1000, GPUSeconds: float64(m.GPUMS) / 1000,
		InputBytes: m.InputBytes, OutputBytes: m.OutputBytes}
}

// UsageDay is one pool's totals of one day.
type UsageDay struct {
	Day  string `json:"date"`
	Pool string `json:"pool"`
	UsageTotals
}

// UsageReport is an account's usage over a range of days.
type UsageReport struct {
	Days  []UsageDay  // by day, then pool; days without jobs are left out
	Total UsageTotals // of Days
}

func (s *Store) meterPrefix(account string) string { return s.p + "meter/" + account + "/" }

// meterKey is the counter job j adds to: its account's, on the day it finished.
func (s *Store) meterKey(j *mj.Job) string {
	h := fnv.New32a()
	h.Write([]byte(j.ID))
	day := j.UpdatedAt
	if j.FinishedAt != nil {
		day = *j.FinishedAt
	}
	return s.meterPrefix(j.AccountID) + day.UTC().Format(DayLayout) + "/" + j.Machine + "/" + strconv.Itoa(int(h.Sum32()%meterShards))
}

// metered reports whether writing j over old adds to j's usage counter
// (meterDelta).
func metered(old, j *mj.Job) bool {
	_, ok := meterDelta(old, j)
	return ok
}

// meterDelta is what writing j over old adds to j's usage counter. The write
// that ends the job with its usage counts the job and its usage. A later write
// that raises the usage of a job already ended (a job cancelled while it ran,
// whose runner's report arrives after the cancel: docs/usage.md) adds only the
// difference, figure by figure: the job is counted once, its usage in full.
func meterDelta(old, j *mj.Job) (meterRecord, bool) {
	if j.Usage == nil || !j.Status.Terminal() {
		return meterRecord{}, false
	}
	if old == nil || !old.Status.Terminal() || old.Usage == nil {
		return meterRecord{}.add(*j.Usage), true
	}
	u, o := *j.Usage, *old.Usage
	d := meterRecord{
		WallMS: max(ms(u.WallSeconds)-ms(o.WallSeconds), 0), CPUMS: max(ms(u.CPUSeconds)-ms(o.CPUSeconds), 0),
		GPUMS:      max(ms(u.GPUSeconds)-ms(o.GPUSeconds), 0),
		InputBytes: max(u.InputBytes-o.InputBytes, 0), OutputBytes: max(u.OutputBytes-o.OutputBytes, 0),
	}
	return d, d != meterRecord{}
}

// counterRead is a meter counter as read (modRev 0: absent).
type counterRead struct {
	rec    meterRecord
	modRev int64
}

// readMeters reads counters by key, at most 100 to a transaction.
func (s *Store) readMeters(ctx context.Context, keys []string) (map[string]counterRead, error) {
	out := make(map[string]counterRead, len(keys))
	for from := 0; from < len(keys); from += 100 {
		chunk := keys[from:min(from+100, len(keys))]
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read usage counters: %w", err)
		}
		for i, k := range chunk {
			var c counterRead
			if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
				if err := json.Unmarshal(kvs[0].Value, &c.rec); err != nil {
					// A damaged counter must not stop its jobs from ending: it
					// starts again from zero (its old figures are lost; said here).
					slog.Default().Error("usage counter unreadable; counting it from zero", "key", k, "err", err)
					c.rec = meterRecord{}
				}
				c.modRev = kvs[0].ModRevision
			}
			out[k] = c
		}
	}
	return out, nil
}

// meterOps are the write of delta (meterDelta) into j's counter c, and the
// condition that c is still what was read.
func (s *Store) meterOps(j *mj.Job, c counterRead, delta meterRecord) (clientv3.Op, clientv3.Cmp) {
	key := s.meterKey(j)
	b, _ := json.Marshal(c.rec.plus(delta))
	return clientv3.OpPut(key, string(b)), clientv3.Compare(clientv3.ModRevision(key), "=", c.modRev)
}

// withMeter adds to a job's write (ops, under cmps) the update of its usage
// counter when the write is the one that counts (metered).
func (s *Store) withMeter(ctx context.Context, old, j *mj.Job, ops []clientv3.Op, cmps []clientv3.Cmp) ([]clientv3.Op, []clientv3.Cmp, error) {
	delta, ok := meterDelta(old, j)
	if !ok {
		return ops, cmps, nil
	}
	key := s.meterKey(j)
	cs, err := s.readMeters(ctx, []string{key})
	if err != nil {
		return nil, nil, err
	}
	op, cmp := s.meterOps(j, cs[key], delta)
	return append(ops, op), append(cmps, cmp), nil
}

// AccountUsage sums an account's usage per day and pool over the UTC days from
// to to (YYYY-MM-DD, both included), from one ranged read.
func (s *Store) AccountUsage(ctx context.Context, account, from, to string) (UsageReport, error) {
	_, ferr := time.Parse(DayLayout, from)
	end, err := time.Parse(DayLayout, to)
	if ferr != nil || err != nil {
		return UsageReport{}, mj.Errorf(mj.EValidation, "usage days are YYYY-MM-DD")
	}
	p := s.meterPrefix(account)
	resp, err := s.cli.Get(ctx, p+from, clientv3.WithRange(p+end.AddDate(0, 0, 1).Format(DayLayout)))
	if err != nil {
		return UsageReport{}, fmt.Errorf("read usage: %w", err)
	}
	sums := map[[2]string]meterRecord{}
	var total meterRecord
	for _, kv := range resp.Kvs {
		parts := strings.Split(string(kv.Key[len(p):]), "/") // day, pool, shard
		var rec meterRecord
		if len(parts) != 3 || json.Unmarshal(kv.Value, &rec) != nil {
			continue
		}
		k := [2]string{parts[0], parts[1]}
		sums[k] = sums[k].plus(rec)
		total = total.plus(rec)
	}
	r := UsageReport{Days: make([]UsageDay, 0, len(sums)), Total: total.totals()}
	for k, m := range sums {
		r.Days = append(r.Days, UsageDay{Day: k[0], Pool: k[1], UsageTotals: m.totals()})
	}
	sort.Slice(r.Days, func(a, b int) bool {
		if r.Days[a].Day != r.Days[b].Day {
			return r.Days[a].Day < r.Days[b].Day
		}
		return r.Days[a].Pool < r.Days[b].Pool
	})
	return r, nil
}

// SweepUsage deletes the usage counters of days before cutoff (YYYY-MM-DD), of
// every account: one range delete per account, up to 64 to a transaction. It
// returns how many counters it deleted.
func (s *Store) SweepUsage(ctx context.Context, cutoff string) (int, error) {
	resp, err := s.cli.Get(ctx, s.p+"accounts/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("list accounts: %w", err)
	}
	n := 0
	for from := 0; from < len(resp.Kvs); from += 64 {
		kvs := resp.Kvs[from:min(from+64, len(resp.Kvs))]
		ops := make([]clientv3.Op, len(kvs))
		for i, kv := range kvs {
			p := s.meterPrefix(string(kv.Key[len(s.p+"accounts/"):]))
			ops[i] = clientv3.OpDelete(p, clientv3.WithRange(p+cutoff))
		}
		tr, err := s.batch(ctx, ops)
		if err != nil {
			return n, fmt.Errorf("delete old usage: %w", err)
		}
		for _, r := range tr.Responses {
			n += int(r.GetResponseDeleteRange().Deleted)
		}
	}
	return n, nil
}

// meteredUpdate is an update of UpdateJobs that ends its job with a usage: its
// index and its writes.
type meteredUpdate struct {
	i   int
	ops []clientv3.Op
}

// Bounds of commitMetered's transactions: jobs that add to one counter go
// together in one nested transaction (etcd refuses two writes of a key in one
// transaction), within the byte bound UpdateJobs keeps. etcd allows 128
// operations in a transaction, and a nested one only 128 less the outer one's
// operations: meterGroupOps, with the outer one's meterTxnGroups.
const (
	meterGroupJobs  = 16
	meterGroupBytes = 512 << 10
	meterTxnBytes   = 1 << 20
	meterTxnGroups  = 32
	meterGroupOps   = 128 - meterTxnGroups - 1
)

// meterGroup is the metered updates of one transaction that add to one counter.
type meterGroup struct {
	key  string
	c    counterRead
	rec  meterRecord // the counter with the group's jobs added
	idx  []int
	ops  []clientv3.Op
	cmps []clientv3.Cmp
	size int
}

// commitMetered commits UpdateJobs' metered updates with their counters: the
// counters read in one go, then the jobs of each counter in one nested
// transaction that compares every job's revision and the counter's. A group
// that fails (one of its jobs changed since it was read) is done job by job
// with UpdateJob, which reads both again.
func (s *Store) commitMetered(ctx context.Context, us []JobUpdate, meters []meteredUpdate, olds, jobs []*mj.Job, errs []error) {
	if len(meters) == 0 {
		return
	}
	alone := func(i int) { jobs[i], errs[i] = s.UpdateJob(ctx, us[i].ID, us[i].Fn) }
	keys := make([]string, len(meters))
	for k, m := range meters {
		keys[k] = s.meterKey(jobs[m.i])
	}
	cs, err := s.readMeters(ctx, keys)
	if err != nil {
		for _, m := range meters {
			alone(m.i)
		}
		return
	}
	stale := map[string]bool{} // counters a failed group's jobs wrote alone
	for pending, pendingKeys := meters, keys; len(pending) > 0; {
		var groups []*meterGroup
		byKey := map[string]*meterGroup{}
		var rest []meteredUpdate
		var restKeys []string
		total := 0
		for k, m := range pending {
			key := pendingKeys[k]
			if stale[key] {
				alone(m.i)
				continue
			}
			n := 0
			for _, op := range m.ops {
				n += len(op.KeyBytes()) + len(op.ValueBytes())
			}
			g := byKey[key]
			full := total > 0 && total+n > meterTxnBytes
			if g == nil {
				full = full || len(groups) == meterTxnGroups
			} else {
				full = full || len(g.idx) == meterGroupJobs || g.size+n > meterGroupBytes || len(g.ops)+len(m.ops)+1 > meterGroupOps
			}
			if full {
				rest, restKeys = append(rest, m), append(restKeys, key)
				continue
			}
			if g == nil {
				g = &meterGroup{key: key, c: cs[key], rec: cs[key].rec}
				byKey[key] = g
				groups = append(groups, g)
			}
			g.idx = append(g.idx, m.i)
			g.ops = append(g.ops, m.ops...)
			g.cmps = append(g.cmps, clientv3.Compare(clientv3.ModRevision(s.jobKey(jobs[m.i].ID)), "=", olds[m.i].Revision))
			delta, _ := meterDelta(olds[m.i], jobs[m.i])
			g.rec = g.rec.plus(delta)
			g.size += n
			total += n
		}
		txns := make([]clientv3.Op, len(groups))
		for k, g := range groups {
			b, _ := json.Marshal(g.rec)
			cmps := append(g.cmps, clientv3.Compare(clientv3.ModRevision(g.key), "=", g.c.modRev))
			txns[k] = clientv3.OpTxn(cmps, append(g.ops, clientv3.OpPut(g.key, string(b))), nil)
		}
		var resp *clientv3.TxnResponse
		if len(txns) > 0 {
			resp, err = s.batch(ctx, txns)
		}
		for k, g := range groups {
			switch {
			case errors.Is(err, rpctypes.ErrTooManyOps):
				for _, i := range g.idx { // the bounds above are wrong: never stuck on them
					alone(i)
				}
			case err != nil:
				for _, i := range g.idx {
					jobs[i], errs[i] = nil, fmt.Errorf("update job: %w", err)
				}
			case resp.Responses[k].GetResponseTxn().Succeeded:
				for _, i := range g.idx {
					jobs[i].Revision = resp.Header.Revision
				}
				cs[g.key] = counterRead{rec: g.rec, modRev: resp.Header.Revision}
			default:
				stale[g.key] = true
				for _, i := range g.idx {
					alone(i)
				}
			}
		}
		pending, pendingKeys = rest, restKeys
	}
}
