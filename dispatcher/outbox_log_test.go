package dispatcher

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestWebhookURLNotLogged: a failed delivery is logged with the receiver's host
// only; for Zapier, Make or n8n the path is the credential.
func TestWebhookURLNotLogged(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Finish()
	blobs, _ := blob.NewLocal(t.TempDir())
	var logs lockedBuf
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Accounts: s, Webhook: sender(),
		Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://x"}, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	d.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acct, _ := s.CreateAccount(ctx, "a")

	// One receiver answers 500; the other refuses connections (the HTTP client's
	// error quotes the whole URL).
	failing := newReceiver(t, 500)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	urls := map[string]string{
		"job-500":     failing.srv.URL + "/hooks/catch/123456/s3cr3tpath/?token=s3cr3tquery",
		"job-refused": "http://" + closed + "/hooks/catch/123456/s3cr3tpath/?token=s3cr3tquery",
	}
	for id, u := range urls {
		now := time.Now()
		s.CreateJob(ctx, &mj.Job{ID: id, AccountID: acct.ID, Status: mj.StatusQueued, Machine: "cpu", WebhookURL: u, CreatedAt: now, QueuedAt: now})
		s.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusFailed; j.ErrorMessage = "x"; return nil })
	}
	go d.webhookLoop(ctx)
	testenv.Eventually(t, 60*time.Second, "both deliveries to fail", func() bool {
		return strings.Count(logs.String(), "webhook not delivered") == 2
	})
	out := logs.String()
	if strings.Contains(out, "s3cr3t") || strings.Contains(out, "catch") {
		t.Fatalf("a webhook URL's path or query is in the log:\n%s", out)
	}
	if !strings.Contains(out, failing.srv.URL+"/…") || !strings.Contains(out, "http://"+closed+"/…") {
		t.Fatalf("the log does not name the receivers' hosts:\n%s", out)
	}
}
