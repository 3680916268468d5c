package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const MiB = 1 << 20

func metricValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	m, ok := c.(prometheus.Metric)
	if !ok {
		t.Fatalf("%T is not a single metric", c)
	}
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.Gauge.GetValue()
	}
	return out.Counter.GetValue()
}

func maintenanceDispatcher(t *testing.T, s *store.Store) (*Dispatcher, *testenv.LogBuffer) {
	t.Helper()
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	return &Dispatcher{Config: cfg, Store: s, Log: slog.New(slog.NewTextHandler(logs, nil))}, logs
}

// fill writes n values of size bytes under prefix; it stops at the first error and
// returns it with the number written.
func fill(ctx context.Context, cli *clientv3.Client, prefix string, n, size int) (int, error) {
	val := strings.Repeat("x", size)
	for i := 0; i < n; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s%05d", prefix, i), val); err != nil {
			return i, err
		}
	}
	return n, nil
}

const nudges = 600

// addNudges writes the small keys deleteAndCompact deletes one by one. Call it
// before the database fills: under NOSPACE etcd refuses puts but allows deletes.
func addNudges(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	for i := 0; i < nudges; i++ {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("/test/nudge/%04d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteAndCompact deletes prefix, compacts all history and waits until etcd
// counts the freed pages as free (at least half the database). bbolt frees pages
// only at a later commit with no older reader, and etcd commits only when a
// transaction wrote something (a delete of nothing is no write), so each poll
// deletes one of addNudges' keys.
func deleteAndCompact(t *testing.T, cli *clientv3.Client, prefix, endpoint string) {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	var st *clientv3.StatusResponse
	i := 0
	testenv.Eventually(t, 25*time.Second, "etcd to count the compacted pages as free", func() bool {
		if i < nudges {
			if r, err := cli.Delete(ctx, fmt.Sprintf("/test/nudge/%04d", i)); err != nil || r.Deleted != 1 {
				t.Fatalf("nudge %d: deleted %v, %v", i, r, err)
			}
			i++
		}
		st, err = cli.Status(ctx, endpoint)
		if err != nil {
			t.Logf("status: %v", err)
			return false
		}
		t.Logf("size %d, in use %d", st.DbSize, st.DbSizeInUse)
		return st.DbSizeInUse > 0 && st.DbSizeInUse*2 <= st.DbSize
	})
}

// TestEtcdMaintenanceDefragments: after tens of MiB are written, deleted and
// compacted, the database file keeps its size until the maintenance pass
// defragments it; the gauges report the sizes and the counter the defragmentation.
func TestEtcdMaintenanceDefragments(t *testing.T) {
	s, e := testenv.Etcd(t)
	cli, ep := s.Client(), e.Endpoint()
	ctx := context.Background()
	d, logs := maintenanceDispatcher(t, s)
	d.Config.Etcd.DefragMinBytes = 8 * MiB // the test's database is small
	oks := metrics.EtcdDefrags.WithLabelValues(ep, "ok")
	oks0 := metricValue(t, oks)

	// A fresh database is not worth it.
	r := d.MaintainEtcd(ctx)
	if len(r.Members) != 1 || r.Members[0].StatusErr != nil || r.Members[0].Defrag != "" || r.Members[0].Endpoint != ep {
		t.Fatalf("first pass: %+v", r.Members)
	}
	if got := metricValue(t, metrics.EtcdDBSize.WithLabelValues(ep)); got != float64(r.Members[0].Size) || got <= 0 {
		t.Fatalf("db size gauge = %v, member size %d", got, r.Members[0].Size)
	}

	addNudges(t, cli)
	if n, err := fill(ctx, cli, "/test/big/", 120, 256<<10); err != nil { // 30 MiB
		t.Fatalf("fill: %d written: %v", n, err)
	}
	deleteAndCompact(t, cli, "/test/big/", ep)
	before, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if before.DbSize < 30*MiB {
		t.Fatalf("database is %d bytes after writing 30 MiB; compaction alone must not shrink the file", before.DbSize)
	}

	r = d.MaintainEtcd(ctx)
	m := r.Members[0]
	if m.Defrag != "ok" || m.DefragErr != nil {
		t.Fatalf("pass did not defragment: %+v\n%s", m, logs)
	}
	after, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if after.DbSize > before.DbSize/4 || m.Size != after.DbSize {
		t.Fatalf("db size %d before, %d after (report %d); want under a quarter", before.DbSize, after.DbSize, m.Size)
	}
	if got := metricValue(t, metrics.EtcdDBSize.WithLabelValues(ep)); got != float64(after.DbSize) {
		t.Fatalf("db size gauge = %v, want %d", got, after.DbSize)
	}
	if got := metricValue(t, metrics.EtcdDBSizeInUse.WithLabelValues(ep)); got != float64(m.InUse) || got <= 0 || got > float64(after.DbSize) {
		t.Fatalf("db size in use gauge = %v, report %d, size %d", got, m.InUse, after.DbSize)
	}
	if got := metricValue(t, oks); got != oks0+1 {
		t.Fatalf("defrags_total{result=ok} = %v, want %v", got, oks0+1)
	}
	if !strings.Contains(logs.String(), "defragmented member") || !strings.Contains(logs.String(), fmt.Sprintf("db_size_before_bytes=%d", before.DbSize)) {
		t.Fatalf("no before/after log:\n%s", logs)
	}

	// Now compact: the next pass leaves it alone.
	if r := d.MaintainEtcd(ctx); r.Members[0].Defrag != "" {
		t.Fatalf("defragmented again: %+v", r.Members[0])
	}
	if got := metricValue(t, oks); got != oks0+1 {
		t.Fatalf("defrags_total{result=ok} = %v after a pass with nothing to do, want %v", got, oks0+1)
	}
}

// TestEtcdMaintenanceClearsNoSpace: at its quota etcd raises NOSPACE and refuses
// writes, and deleting and compacting alone do not bring them back; the maintenance
// pass then defragments, disarms the alarm, and writes work again.
func TestEtcdMaintenanceClearsNoSpace(t *testing.T) {
	const quota = 24 * MiB
	s, e := testenv.EtcdWith(t, store.EmbeddedOptions{QuotaBackendBytes: quota})
	cli, ep := s.Client(), e.Endpoint()
	ctx := context.Background()
	d, logs := maintenanceDispatcher(t, s)
	d.Config.Etcd.QuotaBackendBytes = quota // below config's minimum, set directly
	nospace := metrics.EtcdAlarm.WithLabelValues("NOSPACE")

	addNudges(t, cli)
	n, err := fill(ctx, cli, "/test/fill/", 400, 256<<10) // up to 100 MiB
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("filling a %d-byte quota: %d values written, err %v; want %v", quota, n, err, rpctypes.ErrNoSpace)
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm.String() != "NOSPACE" {
		t.Fatalf("alarms = %v, %v; want one NOSPACE", alarms, err)
	}

	// A pass that may not defragment only reports the alarm and what to do.
	d.Config.Etcd.DefragFreeRatio, d.Config.Etcd.DefragMinBytes = 0.99, 1<<40
	r := d.MaintainEtcd(ctx)
	if r.Members[0].Defrag != "" || len(r.Disarmed) != 0 {
		t.Fatalf("pass with no room to reclaim acted: %+v disarmed %v", r.Members[0], r.Disarmed)
	}
	if got := metricValue(t, nospace); got != 1 {
		t.Fatalf("mediajobs_etcd_alarm{type=NOSPACE} = %v, want 1", got)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "etcdctl alarm disarm") || !strings.Contains(l, "etcdctl defrag") {
		t.Fatalf("NOSPACE was not logged as an error telling what to do:\n%s", l)
	}

	// Deleting and compacting free pages inside the file, but writes stay refused.
	deleteAndCompact(t, cli, "/test/fill/", ep)
	if _, err := cli.Put(ctx, "/test/after", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("Put after delete+compact, before maintenance: %v; want %v", err, rpctypes.ErrNoSpace)
	}

	d.Config.Etcd.DefragFreeRatio, d.Config.Etcd.DefragMinBytes = 0.5, 1*MiB
	r = d.MaintainEtcd(ctx)
	m := r.Members[0]
	if m.Defrag != "ok" || m.Size >= quota || m.Size >= m.SizeBefore/2 {
		t.Fatalf("pass: %+v\n%s", m, logs)
	}
	if len(r.Disarmed) != 1 || r.AlarmActive(alarms.Alarms[0].Alarm) {
		t.Fatalf("NOSPACE not disarmed: disarmed %v, active %v\n%s", r.Disarmed, r.Alarms, logs)
	}
	if got := metricValue(t, nospace); got != 0 {
		t.Fatalf("mediajobs_etcd_alarm{type=NOSPACE} = %v after disarm, want 0", got)
	}
	if alarms, err := cli.AlarmList(ctx); err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after the pass = %v, %v; want none", alarms, err)
	}
	if _, err := cli.Put(ctx, "/test/after", "x"); err != nil {
		t.Fatalf("Put after maintenance: %v", err)
	}
}
