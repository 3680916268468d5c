package dispatcher

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

// hookDispatcher is a dispatcher on a real etcd whose webhook loop makes at most
// concurrency attempts at once.
func hookDispatcher(t *testing.T, concurrency int, w *webhook.Sender) (*Dispatcher, *store.Store) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Webhooks.Concurrency = concurrency
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, _ := blob.NewLocal(t.TempDir())
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Accounts: s, Webhook: w,
		Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://x"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	return d, s
}

// runHookLoop runs d's webhook loop until the test ends (and waits for it then).
func runHookLoop(t *testing.T, d *Dispatcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.webhookLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// finishWithWebhook makes a job of the account terminal with a webhook to url.
func finishWithWebhook(t *testing.T, s *store.Store, id, account, url string) {
	t.Helper()
	ctx, now := context.Background(), time.Now()
	if err := s.CreateJob(ctx, &mj.Job{ID: id, AccountID: account, Status: mj.StatusQueued, Machine: "cpu", WebhookURL: url, CreatedAt: now, QueuedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusFailed; j.ErrorMessage = "x"; return nil }); err != nil {
		t.Fatal(err)
	}
}

func webhookStatus(t *testing.T, s *store.Store, id string) string {
	t.Helper()
	j, err := s.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return string(j.Webhook.Status)
}

// blackHole is a receiver that accepts requests and never answers them (until the
// sender gives up or the test ends).
type blackHole struct {
	srv *httptest.Server
	got atomic.Int32
}

func newBlackHole(t *testing.T) *blackHole {
	b := &blackHole{}
	stop := make(chan struct{})
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.got.Add(1)
		io.ReadAll(r.Body) // so the server notices when the sender hangs up
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: Close waits for the handlers
	return b
}

// TestWebhookFairness: account A's receiver black-holes 100 deliveries, and account
// B's 10, made terminal once A's are stuck, all arrive while every one of A's is
// still pending. Before, 8 of A's deliveries held all 8 slots through every attempt
// and wait, and B's waited in the outbox behind the other 92 (minutes here).
func TestWebhookFairness(t *testing.T) {
	w := &webhook.Sender{Base: 50 * time.Millisecond, Cap: 200 * time.Millisecond, AttemptTimeout: 2 * time.Second, AllowLoopback: true}
	d, s := hookDispatcher(t, 8, w)
	ctx := context.Background()
	a, _ := s.CreateAccount(ctx, "a")
	b, _ := s.CreateAccount(ctx, "b")
	hole, rb := newBlackHole(t), newReceiver(t, 200)
	runHookLoop(t, d)
	for i := range 100 {
		finishWithWebhook(t, s, fmt.Sprintf("a-%03d", i), a.ID, hole.srv.URL)
	}
	testenv.Eventually(t, 30*time.Second, "A's receiver to hold a request", func() bool { return hole.got.Load() > 0 })
	for i := range 10 {
		finishWithWebhook(t, s, fmt.Sprintf("b-%d", i), b.ID, rb.srv.URL)
	}
	testenv.Eventually(t, 60*time.Second, "B's 10 deliveries to arrive and be recorded", func() bool {
		for i := range 10 {
			if webhookStatus(t, s, fmt.Sprintf("b-%d", i)) != "delivered" {
				return false
			}
		}
		return true
	})
	// A's attempts take turns in A's one slot, 2 s each, so none of A's deliveries
	// can have ended yet (the first to end needs 6 attempts).
	for i := range 100 {
		if st := webhookStatus(t, s, fmt.Sprintf("a-%03d", i)); st != "pending" {
			t.Fatalf("A's delivery a-%03d is %s before B's arrived; want all of A's pending", i, st)
		}
	}
	if rb.count() != 10 {
		t.Fatalf("B's receiver got %d requests, want 10", rb.count())
	}
}

// TestWebhookWaitHoldsNoSlot: with one slot in all, a delivery whose receiver
// answers 500, with long waits between attempts, does not hold the slot while it
// waits: another account's delivery arrives while the first is still pending.
func TestWebhookWaitHoldsNoSlot(t *testing.T) {
	w := &webhook.Sender{Base: 4 * time.Second, Cap: 4 * time.Second, AttemptTimeout: 5 * time.Second, AllowLoopback: true}
	d, s := hookDispatcher(t, 1, w)
	ctx := context.Background()
	a, _ := s.CreateAccount(ctx, "a")
	b, _ := s.CreateAccount(ctx, "b")
	bad, ok := newReceiver(t, 500), newReceiver(t, 200)
	runHookLoop(t, d)
	finishWithWebhook(t, s, "x", a.ID, bad.srv.URL)
	testenv.Eventually(t, 30*time.Second, "the first attempt of x", func() bool { return bad.count() > 0 })
	finishWithWebhook(t, s, "y", b.ID, ok.srv.URL)
	testenv.Eventually(t, 30*time.Second, "y to be delivered", func() bool { return webhookStatus(t, s, "y") == "delivered" })
	// x waits 2–4 s before each of its 5 retries, so it is not done yet.
	if st := webhookStatus(t, s, "x"); st != "pending" || bad.count() >= webhook.Attempts {
		t.Fatalf("x is %s after %d attempts when y arrived; want y not to wait for x", st, bad.count())
	}
}

// TestWebhookLimitsShareAndForget: one account holds at most its share of the
// attempt slots and its share of deliveries in progress (the rest parked, run in
// order as its own end); the others still find slots; an idle account leaves no
// entry, and a cancelled wait holds nothing.
func TestWebhookLimitsShareAndForget(t *testing.T) {
	h := newHookLimits(16, 0) // 16 slots, 2 per account; 64 in progress per account
	var as []*hookAccount
	for i := range 16 * progressPerSlot {
		a := h.start("A", fmt.Sprint(i))
		if a == nil {
			t.Fatalf("delivery %d of A parked under its share", i)
		}
		as = append(as, a)
	}
	if h.start("A", "p1") != nil || h.start("A", "p2") != nil {
		t.Fatal("A's deliveries past its share not parked")
	}
	a := as[0]
	r1, _ := h.slot(context.Background(), a)
	r2, _ := h.slot(context.Background(), a)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if _, err := h.slot(ctx, a); err == nil {
		t.Fatal("A got a third slot")
	}
	cancel()
	b := h.start("B", "b")
	rb, err := h.slot(context.Background(), b)
	if err != nil || len(h.slots) != 3 {
		t.Fatalf("B found no slot (%v) or the slots in use are %d, want 3", err, len(h.slots))
	}
	r1()
	r1() // a second release gives back nothing more
	r2()
	rb()
	if len(h.slots) != 0 || len(a.slots) != 0 || len(b.slots) != 0 {
		t.Fatalf("slots still held: %d shared, %d of A, %d of B", len(h.slots), len(a.slots), len(b.slots))
	}
	if h.next(b) != "" {
		t.Fatal("B had nothing parked")
	}
	if got := []string{h.next(a), h.next(a), h.next(a)}; fmt.Sprint(got) != "[p1 p2 ]" {
		t.Fatalf("A's parked deliveries ran as %q, want p1, p2, then none", got)
	}
	for range 16*progressPerSlot - 1 {
		h.next(a) // A's other deliveries end
	}
	if len(h.accounts) != 0 {
		t.Fatalf("idle accounts kept: %v", h.accounts)
	}
}

// flakyAccounts fails the first fail reads of an account, then reads the store.
type flakyAccounts struct {
	AccountSecrets
	fail  int32
	reads atomic.Int32
}

func (f *flakyAccounts) Account(ctx context.Context, id string) (*mj.Account, error) {
	if f.reads.Add(1) <= f.fail {
		return nil, errors.New("etcdserver: request timed out")
	}
	return f.AccountSecrets.Account(ctx, id)
}

// lockedBuffer is a log sink safe for the loop's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWebhookSecretUnreadableSendsNothing: while the account's secret cannot be
// read, nothing reaches the receiver (never an unsigned request): a pass tries a
// few reads, logs once (without the secret) and leaves the entry in the outbox;
// the next pass, once reads work, delivers it signed.
func TestWebhookSecretUnreadableSendsNothing(t *testing.T) {
	d, s := hookDispatcher(t, 8, sender())
	var log lockedBuffer
	d.Log = slog.New(slog.NewTextHandler(&log, nil))
	flaky := &flakyAccounts{AccountSecrets: s, fail: secretTries + 2}
	d.Accounts = flaky
	ctx := context.Background()
	a, _ := s.CreateAccount(ctx, "a")
	if err := s.SetWebhookSecret(ctx, a.ID, "whsec_fair"); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, 200)
	runHookLoop(t, d)
	finishWithWebhook(t, s, "job-s", a.ID, rc.srv.URL)
	testenv.Eventually(t, 30*time.Second, "the first pass to give up", func() bool { return strings.Contains(log.String(), "signing secret could not be read") })
	if rc.count() != 0 || webhookStatus(t, s, "job-s") != "pending" || flaky.reads.Load() != secretTries {
		t.Fatalf("after the failed pass: %d requests, status %s, %d reads", rc.count(), webhookStatus(t, s, "job-s"), flaky.reads.Load())
	}
	if ids, _, _ := s.JobIDs(ctx, s.OutboxPrefix(), 0); len(ids) != 1 {
		t.Fatalf("outbox %v, want the entry kept", ids)
	}
	// The next pass: the minute's resync, brought forward by writing the entry again.
	testenv.Eventually(t, 30*time.Second, "the delivery on a later pass", func() bool {
		if webhookStatus(t, s, "job-s") != "pending" {
			return true
		}
		s.Client().Put(ctx, s.OutboxPrefix()+"job-s", string(mj.StatusFailed))
		return false
	})
	if webhookStatus(t, s, "job-s") != "delivered" || rc.count() != 1 {
		t.Fatalf("status %s after %d requests, want delivered once", webhookStatus(t, s, "job-s"), rc.count())
	}
	req := rc.got[0]
	ts, sig := req.Header.Get("X-Mediajobs-Timestamp"), strings.TrimPrefix(req.Header.Get("X-Mediajobs-Signature"), "v1=")
	if ts == "" || !hmac.Equal([]byte(sig), []byte(webhook.Sign("whsec_fair", ts, rc.bodies[0]))) {
		t.Fatalf("delivered unsigned or wrongly signed: %v", req.Header)
	}
	if out := log.String(); strings.Count(out, "signing secret could not be read") != 1 || strings.Contains(out, "whsec_fair") {
		t.Fatalf("want one warning, without the secret:\n%s", out)
	}
}
