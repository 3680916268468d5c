package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// listJobs answers the readiness check's job list, or fails it with err.
type listJobs struct {
	NomadJobs
	mu  sync.Mutex
	err error
}

func (l *listJobs) List(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return nil, &api.QueryMeta{}, l.err
}

func (l *listJobs) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// /readyz is 200 with a live etcd session and etcd and Nomad answering, and 503
// with a fixed reason otherwise: no session, Nomad unreachable, etcd unreachable.
// No answer carries the underlying error's text. /healthz is 200 throughout.
func TestReadiness(t *testing.T) {
	_, e := testenv.Etcd(t)
	proxy := &switchProxy{addr: testenv.FreeAddr(t), target: strings.TrimPrefix(e.Endpoint(), "http://")}
	proxy.up(t)
	t.Cleanup(proxy.down)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	nomad := &listJobs{}
	d := &Dispatcher{Config: cfg, Store: store.New(cli, "/ready/"), Jobs: nomad, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	expect := func(want int, reason string) {
		t.Helper()
		if code, _ := get("/healthz"); code != 200 {
			t.Fatalf("/healthz: %d", code)
		}
		code, body := get("/readyz")
		if code != want || !strings.Contains(body, reason) {
			t.Fatalf("/readyz: %d %s, want %d %q", code, body, want, reason)
		}
		if strings.Contains(body, "secret-detail") || strings.Contains(body, proxy.addr) || strings.Contains(body, "deadline") {
			t.Fatalf("/readyz leaks an internal error: %s", body)
		}
	}

	expect(503, "not ready: no etcd session") // not campaigning yet
	sess, err := d.Store.NewLeaderSession(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d.session.Store(sess)
	expect(200, `"ready"`)

	nomad.set(&url.Error{Op: "Get", URL: "http://nomad.internal:4646/v1/jobs?secret-detail", Err: errors.New("connection refused")})
	expect(503, "not ready: nomad is not reachable")
	_, metricsBody := get("/metrics")
	if !strings.Contains(metricsBody, "mediajobs_dispatcher_ready 0") {
		t.Fatalf("/metrics lacks mediajobs_dispatcher_ready 0")
	}
	nomad.set(nil)
	expect(200, `"ready"`)
	_, metricsBody = get("/metrics")
	if !strings.Contains(metricsBody, "mediajobs_dispatcher_ready 1") || !strings.Contains(metricsBody, "mediajobs_build_info{") {
		t.Fatalf("/metrics lacks mediajobs_dispatcher_ready 1 or mediajobs_build_info")
	}

	proxy.down() // etcd unreachable; the session lives on until its TTL
	start := time.Now()
	expect(503, "not ready: etcd is not reachable")
	if time.Since(start) > 5*time.Second {
		t.Fatalf("/readyz took %v with etcd unreachable", time.Since(start))
	}
	sess.Orphan()
}

// The queue gauges count each pool's queue and active set and the outbox, and the
// oldest queued job's age; they are dropped when leadership ends.
func TestQueueGauges(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "gauge-a"}, {Name: "gauge-b"}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{Config: cfg, Store: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	ctx := context.Background()
	old := time.Now().Add(-90 * time.Second)
	put := func(key string) {
		if _, err := s.Client().Put(ctx, key, "x"); err != nil {
			t.Fatal(err)
		}
	}
	put(s.PoolQueuePrefix("gauge-a") + padNanos(old) + "_j1")
	put(s.PoolQueuePrefix("gauge-a") + padNanos(time.Now()) + "_j2")
	put(s.PoolActivePrefix("gauge-a") + "j3")
	put(s.PoolActivePrefix("gauge-b") + "j4")
	put(s.PoolActivePrefix("gauge-b") + "j5")
	put(s.OutboxPrefix() + "j6")

	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.queueMetricsLoop(lctx); close(done) }()
	testenv.Eventually(t, 10*time.Second, "the gauges", func() bool {
		return testutil.ToFloat64(metrics.JobsQueued.WithLabelValues("gauge-a")) == 2
	})
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"queued b", testutil.ToFloat64(metrics.JobsQueued.WithLabelValues("gauge-b")), 0},
		{"running a", testutil.ToFloat64(metrics.JobsRunning.WithLabelValues("gauge-a")), 1},
		{"running b", testutil.ToFloat64(metrics.JobsRunning.WithLabelValues("gauge-b")), 2},
		{"outbox", testutil.ToFloat64(metrics.OutboxDepth.WithLabelValues()), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if age := testutil.ToFloat64(metrics.OldestQueued.WithLabelValues("gauge-a")); age < 89 || age > 120 {
		t.Errorf("oldest queued a = %vs, want about 90", age)
	}
	if age := testutil.ToFloat64(metrics.OldestQueued.WithLabelValues("gauge-b")); age != 0 {
		t.Errorf("oldest queued b = %vs, want 0 (empty)", age)
	}
	cancel()
	<-done
	if n := testutil.CollectAndCount(metrics.JobsQueued); n != 0 {
		t.Errorf("%d queue gauges left after leadership ended", n)
	}
}

// padNanos is a queue key's time part (store.queueKey).
func padNanos(t time.Time) string {
	s := "0000000000000000000" + strconv.FormatInt(t.UnixNano(), 10)
	return s[len(s)-19:]
}
