package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// switchProxy forwards TCP connections to a target while up; down closes the
// listener and every connection, so clients get "connection refused", as from a
// Nomad that stopped.
type switchProxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func (p *switchProxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln {
				// down ran between Accept and here: without this check the
				// connection outlived the outage, and a client's keep-alive
				// carried dispatches through it (seen under load).
				p.mu.Unlock()
				c.Close()
				u.Close()
				return
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *switchProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.ln, p.conns = nil, nil
}

// While Nomad is down nothing fails and etcd sees no write storm: a dispatch pass
// stops at the first connection error, and an unchanged status_detail is not
// written again. When Nomad is back, the queue drains.
func TestNomadOutageWritesNothingAndDrains(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1})
	p := &switchProxy{addr: testenv.FreeAddr(t), target: strings.TrimPrefix(r.agent.Addr, "http://")}
	p.up(t)
	defer p.down()
	client, err := api.NewClient(&api.Config{Address: "http://" + p.addr})
	if err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{
		Config: r.cfg, Store: r.store, Jobs: client.Jobs(), Allocs: client.Allocations(), Events: client.EventStream(),
		Blobs: r.blobs, Signer: blob.Signer{Secret: []byte("test"), Base: "http://127.0.0.1:1"},
		Webhook: &webhook.Sender{}, RunnerCommand: r.runner, Name: "d",
		Log:            slog.New(slog.NewTextHandler(&r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReconcileEvery: time.Second, LeaderTTL: 2 * time.Second, CallTimeout: 5 * time.Second,
	}
	d.defaults() // its services, read below while Run runs
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 60*time.Second, "the pool to be registered", func() bool { return d.nomad.poolRegistered("cpu") })

	p.down()
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", 900+i)
		r.create(ids[i], "cpu")
	}
	ctxb := context.Background()
	start, _ := r.store.Revision(ctxb)
	errs := func() float64 { return testutil.ToFloat64(metrics.Dispatches.WithLabelValues("cpu", "error")) }
	base := errs()
	// Several dispatch passes and reconciles fail against the stopped Nomad.
	testenv.Eventually(t, 90*time.Second, "three failed dispatch passes", func() bool { return errs() >= base+3 })
	end, _ := r.store.Revision(ctxb)
	// Count the revisions that wrote job state. Under load the leader's janitor
	// may run its first pass inside the window; its writes are not a storm.
	revs := writesBetween(t, r, start, end)
	jobRevs := 0
	for _, keys := range revs {
		for _, k := range keys {
			if strings.Contains(k, "/jobs/") || strings.Contains(k, "/queue/") || strings.Contains(k, "/active/") {
				jobRevs++
				break
			}
		}
	}
	if jobRevs > 2 || len(revs) > 10 {
		t.Fatalf("%d etcd revisions (%d of them job writes) during the outage for %d queued jobs (want at most 2 job writes: one status_detail): %v", len(revs), jobRevs, n, revs)
	}
	for _, id := range ids {
		if j := r.job(id); j.Status != mj.StatusQueued {
			t.Fatalf("job %s is %s during the outage: %q", id, j.Status, j.ErrorMessage)
		}
	}

	p.up(t)
	testenv.Eventually(t, 120*time.Second, "the queue to drain once Nomad is back", func() bool {
		left, _, _ := r.store.JobIDs(ctxb, r.store.PoolQueuePrefix("cpu"), 0)
		return len(left) == 0
	})
	for _, id := range ids {
		if j := r.job(id); j.NomadJobID == "" || j.Status.Terminal() {
			t.Fatalf("job %s after the outage: %s %q", id, j.Status, j.ErrorMessage)
		}
	}
}

// writesBetween returns the keys written in each revision after start up to end.
func writesBetween(t *testing.T, r *nomadRig, start, end int64) map[int64][]string {
	t.Helper()
	out := map[int64][]string{}
	if end <= start {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := r.store.Client().Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(start+1))
	for resp := range w {
		if err := resp.Err(); err != nil {
			t.Fatalf("reading etcd's history: %v", err)
		}
		for _, ev := range resp.Events {
			if rev := ev.Kv.ModRevision; rev <= end {
				out[rev] = append(out[rev], string(ev.Kv.Key))
			}
		}
		if resp.Header.Revision >= end && len(resp.Events) > 0 && resp.Events[len(resp.Events)-1].Kv.ModRevision >= end {
			return out
		}
	}
	t.Fatalf("etcd's history from %d to %d was not read in time: %v", start+1, end, out)
	return out
}
