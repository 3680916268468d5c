package dispatcher

import (
	"context"
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
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

// TestGroupSpillsOnlyWhenAFullGroupWaits: with par 2, a second group goes out
// while the first is in flight only once a full group (max calls) waits; fewer
// wait for the first, so groups stay full and a lone call still waits for nothing.
func TestGroupSpillsOnlyWhenAFullGroupWaits(t *testing.T) {
	release := make(chan struct{})
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	var sizes []int
	g := &group[int, int]{
		key: func(i int) string { return fmt.Sprint(i) },
		max: 3, par: 2,
		run: func(_ context.Context, ins []int) ([]int, []error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			sizes = append(sizes, len(ins))
			mu.Unlock()
			<-release
			return ins, make([]error, len(ins))
		},
	}
	var wg sync.WaitGroup
	do := func(i int) {
		defer wg.Done()
		if out, err := g.Do(context.Background(), i); out != i || err != nil {
			t.Errorf("call %d: %d, %v", i, out, err)
		}
	}
	wg.Add(1)
	go do(0)
	testenv.Eventually(t, 10*time.Second, "the first group in flight", func() bool { return inFlight.Load() == 1 })
	queued := func(n int) func() bool {
		return func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == n }
	}
	for i := 1; i <= 2; i++ {
		wg.Add(1)
		go do(i)
		testenv.Eventually(t, 10*time.Second, "call queued", queued(i))
	}
	g.mu.Lock()
	spills := g.spills
	g.mu.Unlock()
	if spills != 0 || inFlight.Load() != 1 {
		t.Fatalf("2 calls waiting (max 3): %d groups in flight, want 1", inFlight.Load())
	}
	wg.Add(1)
	go do(3) // a full group waits now: it goes out beside the first
	testenv.Eventually(t, 10*time.Second, "a second group in flight", func() bool { return inFlight.Load() == 2 })
	for i := 4; i <= 8; i++ { // par is 2: these wait
		wg.Add(1)
		go do(i)
	}
	testenv.Eventually(t, 10*time.Second, "the rest queued", queued(5))
	close(release)
	wg.Wait()
	if most.Load() != 2 {
		t.Fatalf("at most %d groups were in flight, want 2", most.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if sizes[0] != 1 || sizes[1] != 3 {
		t.Fatalf("groups of %v: want the lone call alone, then a full group beside it", sizes)
	}
	testenv.Eventually(t, 10*time.Second, "the loops to end", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.running && g.spills == 0
	})
}

// hookJobs finishes n jobs of one account with webhooks to url (before any
// loop runs, so the loop finds them all at once: one burst).
func hookJobs(t *testing.T, s *store.Store, prefix string, n int, url func(i int) string) (string, []string) {
	t.Helper()
	a, err := s.CreateAccount(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
		finishWithWebhook(t, s, ids[i], a.ID, url(i))
	}
	return a.ID, ids
}

func jobWebhook(t *testing.T, s *store.Store, id string) mj.WebhookState {
	t.Helper()
	j, err := s.Job(context.Background(), id)
	if err != nil || j.Webhook == nil {
		t.Fatalf("job %s: %v (webhook %v)", id, err, j)
	}
	return *j.Webhook
}

func outboxLen(t *testing.T, s *store.Store) int {
	t.Helper()
	ids, _, err := s.JobIDs(context.Background(), s.OutboxPrefix(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(ids)
}

// TestOutboxBurstFewRevisions: a burst of N deliveries is recorded with far
// fewer etcd revisions than N: the attempt counts and the outcomes (with the
// outbox entries' deletes) of many deliveries share each transaction. One
// write per delivery and step would be 2N.
func TestOutboxBurstFewRevisions(t *testing.T) {
	const n = 200
	d, s := hookDispatcher(t, 128, sender())
	rc := newReceiver(t, 200)
	_, ids := hookJobs(t, s, "burst", n, func(int) string { return rc.srv.URL })
	ctx := context.Background()
	rev0, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runHookLoop(t, d)
	testenv.Eventually(t, 60*time.Second, "every delivery recorded", func() bool { return outboxLen(t, s) == 0 })
	rev1, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if w := jobWebhook(t, s, id); w.Status != mj.WebhookDelivered || w.Attempts != 1 {
			t.Fatalf("%s: %+v, want delivered at the first attempt", id, w)
		}
	}
	if rc.count() != n {
		t.Fatalf("the receiver got %d requests for %d deliveries", rc.count(), n)
	}
	if revs := rev1 - rev0; revs > n/4 {
		t.Fatalf("%d deliveries took %d etcd revisions, want at most %d", n, revs, n/4)
	} else {
		t.Logf("%d deliveries recorded in %d etcd revisions", n, revs)
	}
}

// TestOutboxBatchOneFailedReceiver: in a burst whose deliveries share
// transactions, one receiver that keeps failing does not hold back the others'
// outcomes, and only its delivery is retried.
func TestOutboxBatchOneFailedReceiver(t *testing.T) {
	const n = 40
	d, s := hookDispatcher(t, 128, sender())
	ok := newReceiver(t, 200)
	var healed atomic.Bool
	var badGot atomic.Int32
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		badGot.Add(1)
		if healed.Load() {
			w.WriteHeader(200)
			return
		}
		w.WriteHeader(503)
	}))
	t.Cleanup(bad.Close)
	const failing = 17
	_, ids := hookJobs(t, s, "mixed", n, func(i int) string {
		if i == failing {
			return bad.URL
		}
		return ok.srv.URL
	})
	runHookLoop(t, d)
	testenv.Eventually(t, 60*time.Second, "the others recorded", func() bool { return outboxLen(t, s) == 1 })
	for i, id := range ids {
		w := jobWebhook(t, s, id)
		switch {
		case i == failing && (w.Status != mj.WebhookPending || w.Attempts < 1 || w.LastHTTPStatus != 0 && w.LastHTTPStatus != 503):
			t.Fatalf("the failing delivery %s: %+v, want pending after its first attempts", id, w)
		case i != failing && (w.Status != mj.WebhookDelivered || w.Attempts != 1 || w.LastHTTPStatus != 200):
			t.Fatalf("%s: %+v, want delivered at the first attempt", id, w)
		}
	}
	healed.Store(true)
	testenv.Eventually(t, 60*time.Second, "the failing delivery to succeed", func() bool { return outboxLen(t, s) == 0 })
	w := jobWebhook(t, s, ids[failing])
	if w.Status != mj.WebhookDelivered || w.Attempts < 2 || int(badGot.Load()) != w.Attempts {
		t.Fatalf("the retried delivery: %+v after %d requests, want delivered after its retries, each counted", w, badGot.Load())
	}
	if ok.count() != n-1 {
		t.Fatalf("the healthy receiver got %d requests for %d deliveries: only the failing one may be retried", ok.count(), n-1)
	}
}

// TestOutboxLeaderChangeMidBatch: the leader is deposed while a burst's
// requests are in flight. The receiver answers 2xx, but the batched outcome
// write is fenced by the old term and refused: nothing is recorded, the
// entries stay. The next leader delivers every one again under the same
// delivery id (at least once) and records each once.
func TestOutboxLeaderChangeMidBatch(t *testing.T) {
	const n = 30
	d, s := hookDispatcher(t, 128, sender())
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string][]string{} // job id (URL path) -> delivery ids
	hold := make(chan struct{})
	var held atomic.Int32
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("X-Mediajobs-Delivery"))
		mu.Unlock()
		held.Add(1)
		<-hold
		w.WriteHeader(200)
	}))
	t.Cleanup(rc.Close)
	t.Cleanup(func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	})
	_, ids := hookJobs(t, s, "fenced", n, func(i int) string { return fmt.Sprintf("%s/%d", rc.URL, i) })

	// The first term: its writes are fenced by a key of its own.
	term := func(key string) {
		resp, err := s.Client().Put(ctx, key, "x")
		if err != nil {
			t.Fatal(err)
		}
		var fenced Store = s.FencedBy(key, resp.Header.Revision)
		d.term.Store(&fenced)
	}
	term("/test/term/1")
	var logs lockedBuf
	d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	// loop runs a term's webhook loop; the returned func ends it (once).
	loop := func() func() {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); d.webhookLoop(lctx) }()
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return stop
	}
	stop := loop()
	// Every attempt is counted (under the first term) before it is sent; the
	// first term's share of attempts in flight is what arrives.
	testenv.Eventually(t, 60*time.Second, "requests in flight", func() bool { return held.Load() > 0 })
	if _, err := s.Client().Delete(ctx, "/test/term/1"); err != nil { // deposed
		t.Fatal(err)
	}
	close(hold)
	// The rest of the burst: the attempt counts are refused now, so no more is
	// sent; the answered ones' outcomes are refused too.
	testenv.Eventually(t, 60*time.Second, "the refused outcomes", func() bool {
		return strings.Count(logs.String(), "record webhook outcome") == int(held.Load())
	})
	stop()
	sent := int(held.Load())
	if outboxLen(t, s) != n {
		t.Fatalf("after the deposed term: %d outbox entries, want all %d", outboxLen(t, s), n)
	}
	for _, id := range ids {
		if w := jobWebhook(t, s, id); w.Status != mj.WebhookPending || w.Attempts > 1 || w.DeliveredAt != nil {
			t.Fatalf("%s after the deposed term: %+v, want pending, at most its one attempt counted", id, w)
		}
	}

	// The next term.
	term("/test/term/2")
	loop()
	testenv.Eventually(t, 60*time.Second, "the next term's deliveries recorded", func() bool { return outboxLen(t, s) == 0 })
	again := 0
	mu.Lock()
	defer mu.Unlock()
	for i, id := range ids {
		w := jobWebhook(t, s, id)
		reqs := got[fmt.Sprintf("/%d", i)]
		// Every request sent was counted first (never fewer recorded than sent).
		if w.Status != mj.WebhookDelivered || w.DeliveredAt == nil || len(reqs) < 1 || len(reqs) > 2 || len(reqs) > w.Attempts {
			t.Fatalf("%s: %+v after %d requests, want delivered with every request counted", id, w, len(reqs))
		}
		for _, dl := range reqs {
			if dl != w.DeliveryID {
				t.Fatalf("%s: delivery ids %v, want %s each time", id, reqs, w.DeliveryID)
			}
		}
		if len(reqs) == 2 {
			again++
		}
	}
	if again != sent {
		t.Fatalf("%d deliveries were sent again, want the %d the deposed term sent", again, sent)
	}
}

// TestOutboxSecretReadsShared: the deliveries of one account's burst share
// their reads of its signing secret (one read per group of waiting deliveries,
// not one each), and every request is signed with it.
func TestOutboxSecretReadsShared(t *testing.T) {
	const n = 100
	d, s := hookDispatcher(t, 128, sender())
	counted := &flakyAccounts{AccountSecrets: s}
	d.Accounts = counted
	rc := newReceiver(t, 200)
	account, _ := hookJobs(t, s, "signed", n, func(int) string { return rc.srv.URL })
	if err := s.SetWebhookSecret(context.Background(), account, "whsec_burst"); err != nil {
		t.Fatal(err)
	}
	runHookLoop(t, d)
	testenv.Eventually(t, 60*time.Second, "every delivery recorded", func() bool { return outboxLen(t, s) == 0 })
	if rc.count() != n {
		t.Fatalf("the receiver got %d requests for %d deliveries", rc.count(), n)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, req := range rc.got {
		ts, sig := req.Header.Get("X-Mediajobs-Timestamp"), strings.TrimPrefix(req.Header.Get("X-Mediajobs-Signature"), "v1=")
		if ts == "" || sig != webhook.Sign("whsec_burst", ts, rc.bodies[i]) {
			t.Fatalf("request %d unsigned or wrongly signed: %v", i, req.Header)
		}
	}
	if r := counted.reads.Load(); r > n/4 {
		t.Fatalf("%d deliveries read the account %d times, want at most %d", n, r, n/4)
	} else {
		t.Logf("%d deliveries, %d reads of the account", n, r)
	}
}
