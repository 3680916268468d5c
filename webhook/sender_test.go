package webhook

import (
	"context"
	"crypto/hmac"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/netguard"
)

// receiver is a loopback webhook receiver answering a scripted list of statuses
// (the last one repeats), recording every request.
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

func sender() *Sender {
	return &Sender{Base: 40 * time.Millisecond, Cap: time.Second, AttemptTimeout: 5 * time.Second, AllowLoopback: true}
}

func TestWebhookBackoffGrows(t *testing.T) {
	w := &Sender{Base: time.Second, Cap: 30 * time.Second}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 5; n++ {
		full := time.Second << (n - 1)
		for i := 0; i < 200; i++ {
			if d := w.Backoff(n, r); d < full/2 || d > full {
				t.Fatalf("retry %d waits %s, want within [%s, %s]", n, d, full/2, full)
			}
		}
	}
	if d := w.Backoff(10, r); d > 30*time.Second || d < 15*time.Second {
		t.Fatalf("capped wait %s", d)
	}
}

func TestWebhook500503ThenOK(t *testing.T) {
	rc := newReceiver(t, 500, 503, 200)
	var seen []int
	d := sender().Send(context.Background(), Message{URL: rc.srv.URL, Event: "job.succeeded", DeliveryID: "d-1", Body: []byte(`{"id":"x"}`),
		OnAttempt: func(n int) { seen = append(seen, n) }})
	if d.Err != nil || d.Attempts != 3 || d.LastStatus != 200 || rc.count() != 3 {
		t.Fatalf("delivery %+v after %d requests, want delivered on the 3rd", d, rc.count())
	}
	if len(seen) != 3 || seen[2] != 3 {
		t.Fatalf("attempts reported %v", seen)
	}
	for i, req := range rc.got {
		if req.Header.Get("X-Mediajobs-Delivery") != "d-1" || req.Header.Get("Content-Type") != "application/json" ||
			!strings.HasPrefix(req.Header.Get("User-Agent"), "mediajobs/") || req.Header.Get("X-Mediajobs-Event") != "job.succeeded" {
			t.Fatalf("attempt %d headers %v", i+1, req.Header)
		}
	}
	// The waits are at least half of 40 ms and 80 ms (a busy machine only adds to them).
	if g1, g2 := rc.at[1].Sub(rc.at[0]), rc.at[2].Sub(rc.at[1]); g1 < 20*time.Millisecond || g2 < 40*time.Millisecond {
		t.Fatalf("gaps %s, %s are shorter than the schedule", g1, g2)
	}
}

func TestWebhookAlways500GetsExactlySixAttempts(t *testing.T) {
	rc := newReceiver(t, 500)
	d := sender().Send(context.Background(), Message{URL: rc.srv.URL, Event: "job.failed", DeliveryID: "d", Body: []byte(`{}`)})
	if d.Err == nil || d.Attempts != 6 || d.LastStatus != 500 || rc.count() != 6 {
		t.Fatalf("delivery %+v after %d requests, want 1 + 5 attempts then failure", d, rc.count())
	}
	// Resumed after a restart with 4 attempts made: 2 left.
	rc2 := newReceiver(t, 500)
	d = sender().Send(context.Background(), Message{URL: rc2.srv.URL, Event: "job.failed", DeliveryID: "d", Body: []byte(`{}`), Done: 4})
	if d.Attempts != 6 || rc2.count() != 2 {
		t.Fatalf("resumed delivery %+v after %d requests, want 2 more", d, rc2.count())
	}
}

func TestWebhookRetries4xxButNot3xx(t *testing.T) {
	rc := newReceiver(t, 404, 501, 200)
	if d := sender().Send(context.Background(), Message{URL: rc.srv.URL, Event: "job.failed", DeliveryID: "d", Body: []byte(`{}`)}); d.Err != nil || rc.count() != 3 {
		t.Fatalf("delivery %+v after %d requests, want delivered on the 3rd (404 and 501 are retried)", d, rc.count())
	}
	moved := newReceiver(t, 301)
	if d := sender().Send(context.Background(), Message{URL: moved.srv.URL, Event: "job.failed", DeliveryID: "d", Body: []byte(`{}`)}); d.Err == nil || moved.count() != 1 {
		t.Fatalf("delivery %+v after %d requests, want one attempt for a 301", d, moved.count())
	}
}

func TestWebhookHonoursRetryAfter(t *testing.T) {
	rc := newReceiver(t, 429, 200)
	d := sender().Send(context.Background(), Message{URL: rc.srv.URL, Event: "job.failed", DeliveryID: "d", Body: []byte(`{}`)})
	if d.Err != nil || rc.count() != 2 || rc.at[1].Sub(rc.at[0]) < time.Second {
		t.Fatalf("delivery %+v, gap %s: Retry-After: 1 not honoured", d, rc.at[1].Sub(rc.at[0]))
	}
}

func TestWebhookDoesNotFollowRedirects(t *testing.T) {
	target := newReceiver(t, 200)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL, http.StatusFound)
	}))
	defer redirect.Close()
	d := sender().Send(context.Background(), Message{URL: redirect.URL, Event: "job.failed", DeliveryID: "d", Body: []byte(`{}`)})
	if d.Err == nil || !strings.Contains(d.Err.Error(), "redirects are not followed") || target.count() != 0 {
		t.Fatalf("delivery %+v, redirect target got %d requests", d, target.count())
	}
}

func TestWebhookRefusesInternalAddresses(t *testing.T) {
	rc := newReceiver(t, 200)
	w := sender()
	w.AllowLoopback = false
	if d := w.Send(context.Background(), Message{URL: rc.srv.URL, Event: "e", DeliveryID: "d", Body: []byte(`{}`), Done: 5}); d.Err == nil || !strings.Contains(d.Err.Error(), "loopback") || rc.count() != 0 {
		t.Fatalf("loopback webhook without allow_loopback: %+v", d)
	}
	// Named only to prove it is refused: the dialer stops before any packet is sent.
	if d := w.Send(context.Background(), Message{URL: "http://169.254.169.254/latest", Event: "e", DeliveryID: "d", Body: []byte(`{}`), Done: 5}); d.Err == nil || !strings.Contains(d.Err.Error(), "169.254.0.0/16") {
		t.Fatalf("link-local webhook: %+v", d)
	}
}

// The control plane is refused even where loopback is allowed (make run): a
// webhook is a POST the service makes for a user.
func TestWebhookRefusesTheControlPlane(t *testing.T) {
	rc := newReceiver(t, 200)
	w := sender()
	w.Guard.Control = netguard.NewControlPlane([]string{rc.srv.URL}) // as if it were nomad.address
	if d := w.Send(context.Background(), Message{URL: rc.srv.URL, Event: "e", DeliveryID: "d", Body: []byte(`{}`), Done: 5}); d.Err == nil || !strings.Contains(d.Err.Error(), "control plane") || rc.count() != 0 {
		t.Fatalf("a webhook to the control plane: %+v, %d requests", d, rc.count())
	}
}

func TestWebhookSignatureVerifies(t *testing.T) {
	rc := newReceiver(t, 200)
	body := []byte(`{"id":"x","status":"succeeded"}`)
	sender().Send(context.Background(), Message{URL: rc.srv.URL, Event: "job.succeeded", DeliveryID: "d", Body: body, Secret: "whsec_test"})
	req := rc.got[0]
	ts, sig := req.Header.Get("X-Mediajobs-Timestamp"), strings.TrimPrefix(req.Header.Get("X-Mediajobs-Signature"), "v1=")
	if ts == "" || !hmac.Equal([]byte(sig), []byte(Sign("whsec_test", ts, rc.bodies[0]))) {
		t.Fatalf("signature %q over %q does not verify", sig, ts)
	}
	if hmac.Equal([]byte(sig), []byte(Sign("other", ts, rc.bodies[0]))) || hmac.Equal([]byte(sig), []byte(Sign("whsec_test", ts, []byte(`{}`)))) {
		t.Fatal("signature verifies with the wrong secret or body")
	}
	unsigned := newReceiver(t, 200)
	sender().Send(context.Background(), Message{URL: unsigned.srv.URL, Event: "e", DeliveryID: "d", Body: body})
	if unsigned.got[0].Header.Get("X-Mediajobs-Signature") != "" {
		t.Fatal("signed without a secret")
	}
}

// TestWebhookSendSlotPerAttempt: Send takes the slot after counting each attempt
// and gives it back as soon as the attempt's answer is in, before the wait; when
// the context ends while it waits for a slot, nothing is sent.
func TestWebhookSendSlotPerAttempt(t *testing.T) {
	var held, taken atomic.Int32
	var heldAtCount, heldAtServer []int32
	var mu sync.Mutex
	answers := []int{500, 503, 200}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		heldAtServer = append(heldAtServer, held.Load())
		status := answers[min(len(heldAtServer), len(answers))-1]
		mu.Unlock()
		w.WriteHeader(status)
	}))
	defer srv.Close()
	slot := func(ctx context.Context) (func(), error) {
		taken.Add(1)
		held.Add(1)
		var once sync.Once
		return func() { once.Do(func() { held.Add(-1) }) }, nil
	}
	d := sender().Send(context.Background(), Message{URL: srv.URL, Event: "e", DeliveryID: "d", Body: []byte(`{}`), Slot: slot,
		OnAttempt: func(int) { mu.Lock(); heldAtCount = append(heldAtCount, held.Load()); mu.Unlock() }})
	if d.Err != nil || len(heldAtServer) != 3 || taken.Load() != 3 || held.Load() != 0 {
		t.Fatalf("delivery %+v: %d requests, %d slots taken, %d still held", d, len(heldAtServer), taken.Load(), held.Load())
	}
	if fmt.Sprint(heldAtCount) != "[0 0 0]" || fmt.Sprint(heldAtServer) != "[1 1 1]" {
		t.Fatalf("slots held when counting %v, when the receiver saw the attempt %v; want none and one", heldAtCount, heldAtServer)
	}

	// No slot comes: the context ends while waiting, and nothing is sent.
	never := newReceiver(t, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	wait := func(ctx context.Context) (func(), error) { <-ctx.Done(); return nil, ctx.Err() }
	if d := sender().Send(ctx, Message{URL: never.srv.URL, Event: "e", DeliveryID: "d", Body: []byte(`{}`), Slot: wait}); d.Err == nil || never.count() != 0 {
		t.Fatalf("delivery %+v with no slot, %d requests sent", d, never.count())
	}
}

// TestWebhookAllowCIDRs: a receiver inside server.allow_cidrs gets its webhook,
// one outside does not. On loopback aliases with allow_loopback off: 127.0.0.2
// plays a listed internal host, 127.0.0.3 an unlisted one.
func TestWebhookAllowCIDRs(t *testing.T) {
	receiver := func(addr string) string {
		ln, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", addr, err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	listed, unlisted := receiver("127.0.0.2"), receiver("127.0.0.3")
	guard, err := netguard.NewPolicy(false, []string{"127.0.0.2/32"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &Sender{Base: 10 * time.Millisecond, Cap: 20 * time.Millisecond, AttemptTimeout: 2 * time.Second, Guard: guard}
	if d := w.Send(context.Background(), Message{URL: listed + "/hook", Event: "job.succeeded", DeliveryID: "d1", Body: []byte(`{}`)}); d.Err != nil || d.LastStatus != 204 {
		t.Fatalf("listed receiver: %+v", d)
	}
	d := w.Send(context.Background(), Message{URL: unlisted + "/hook", Event: "job.succeeded", DeliveryID: "d2", Body: []byte(`{}`)})
	if d.Err == nil || !strings.Contains(d.Err.Error(), "loopback") {
		t.Fatalf("unlisted receiver: %+v", d)
	}
}

// TestWebhookReusesConnections: deliveries to one receiver reuse kept-alive
// connections, also when the receiver answers with a body (most do: Zapier,
// n8n and Make answer JSON), which the sender must read for its connection to
// be reused; and many in flight to one host keep their connections idle between
// bursts instead of dialling again.
func TestWebhookReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"success","id":"`+strings.Repeat("x", 200)+`"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	w := sender()
	w.MaxIdlePerHost = 128
	send := func(i int) {
		if d := w.Send(context.Background(), Message{URL: srv.URL, Event: "job.succeeded", DeliveryID: fmt.Sprint(i), Body: []byte(`{}`)}); d.Err != nil {
			t.Fatal(d.Err)
		}
	}
	for i := range 20 {
		send(i)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 deliveries one after another opened %d connections, want 1", n)
	}
	// Bursts of 120 at once: the connections of the first stay idle for the next.
	const burst = 120
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range burst {
			wg.Add(1)
			go func() { defer wg.Done(); send(round*burst + i) }()
		}
		wg.Wait()
	}
	if n := conns.Load(); n > burst+1 {
		t.Fatalf("3 bursts of %d opened %d connections, want at most %d (the first burst's, kept)", burst, n, burst+1)
	}
}
