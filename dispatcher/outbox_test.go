package dispatcher

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

// receiver is a loopback webhook receiver answering a scripted list of statuses
// (the last one repeats), recording every request. webhook/sender_test.go has
// its twin: test helpers are not shared between packages.
type receiver struct {
	mu      sync.Mutex
	answers []int
	got     []*http.Request
	bodies  [][]byte
	at      []time.Time
	srv     *httptest.Server
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.got)
		r.got, r.bodies, r.at = append(r.got, req), append(r.bodies, b), append(r.at, time.Now())
		status := r.answers[min(n, len(r.answers)-1)]
		r.mu.Unlock()
		if status == 429 {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }

func sender() *webhook.Sender {
	return &webhook.Sender{Base: 40 * time.Millisecond, Cap: time.Second, AttemptTimeout: 5 * time.Second, AllowLoopback: true}
}

// TestOutboxDelivery runs the dispatcher's outbox worker on a real etcd: a job that
// finishes with a webhook gets one delivery id, its attempts recorded as they
// happen, and the final state on the job.
func TestOutboxDelivery(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Finish()
	blobs, _ := blob.NewLocal(t.TempDir())
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Accounts: s, Webhook: sender(),
		Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://x"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acct, _ := s.CreateAccount(ctx, "a")
	s.SetWebhookSecret(ctx, acct.ID, "whsec_1")
	ok, bad := newReceiver(t, 503, 200), newReceiver(t, 500)
	mk := func(id, url string) {
		now := time.Now()
		s.CreateJob(ctx, &mj.Job{ID: id, AccountID: acct.ID, Status: mj.StatusQueued, Machine: "cpu", WebhookURL: url, CreatedAt: now, QueuedAt: now})
		s.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusFailed; j.ErrorMessage = "x"; return nil })
	}
	mk("job-ok", ok.srv.URL)
	mk("job-bad", bad.srv.URL)
	go d.webhookLoop(ctx)
	var jOK, jBad *mj.Job
	testenv.Eventually(t, 30*time.Second, "both deliveries to settle", func() bool {
		jOK, _ = s.Job(ctx, "job-ok")
		jBad, _ = s.Job(ctx, "job-bad")
		return jOK.Webhook.Status != "pending" && jBad.Webhook.Status != "pending"
	})
	if w := jOK.Webhook; w.Status != "delivered" || w.Attempts != 2 || w.DeliveredAt == nil || w.LastHTTPStatus != 200 || w.DeliveryID == "" {
		t.Fatalf("delivered webhook state %+v", w)
	}
	if ok.got[0].Header.Get("X-Mediajobs-Delivery") != jOK.Webhook.DeliveryID || ok.got[1].Header.Get("X-Mediajobs-Delivery") != jOK.Webhook.DeliveryID {
		t.Fatal("the delivery id changed between attempts or differs from the job's")
	}
	if w := jBad.Webhook; w.Status != "failed" || w.Attempts != 6 || w.LastHTTPStatus != 500 || !strings.Contains(w.LastError, "500") || bad.count() != 6 {
		t.Fatalf("failed webhook state %+v after %d requests", w, bad.count())
	}
	var got map[string]any
	json.Unmarshal(ok.bodies[1], &got)
	if got["id"] != "job-ok" || got["status"] != "failed" || ok.got[1].Header.Get("X-Mediajobs-Signature") == "" {
		t.Fatalf("body %v / unsigned", got)
	}
	ids, _, _ := s.JobIDs(ctx, s.OutboxPrefix(), 0)
	if len(ids) != 0 {
		t.Fatalf("outbox not emptied: %v", ids)
	}
}
