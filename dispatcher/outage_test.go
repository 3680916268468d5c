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
	if writes := end - start; writes > 2 {
		t.Fatalf("%d etcd revisions during the outage for %d queued jobs (want at most 2: one status_detail)", writes, n)
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
