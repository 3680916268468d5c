package cluster

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

// TestWebhookSurvivesDispatcherCrash: the receiver is down, the dispatcher dies
// (kill -9) between attempts, the receiver comes back, another dispatcher starts:
// the delivery arrives once, with its delivery id, and the attempts carry over.
func TestWebhookSurvivesDispatcherCrash(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	addr := e2e.FreeAddr() // nobody listens yet: connection refused
	d1 := c.StartDispatcher("d1")
	body := c.JobBody("hook-crash", quickCmd)
	body["webhook_url"] = "http://" + addr + "/hook"
	id := c.Create(body)
	c.WaitStatus(id, 60*time.Second, "succeeded")
	testenv.Eventually(t, 30*time.Second, "two failed attempts", func() bool {
		w := c.Stored(id).Webhook
		return w != nil && w.Attempts >= 2
	})
	d1.Kill()
	before := c.Stored(id).Webhook
	if before.Status != "pending" {
		t.Fatalf("webhook %+v before the restart", before)
	}

	var mu sync.Mutex
	var got []http.Header
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
	})}
	go srv.Serve(ln)
	defer srv.Close()

	c.StartDispatcher("d2")
	testenv.Eventually(t, 60*time.Second, "the delivery", func() bool { return c.Stored(id).Webhook.Status == "delivered" })
	after := c.Stored(id).Webhook
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Get("X-Mediajobs-Delivery") != before.DeliveryID || after.DeliveryID != before.DeliveryID {
		t.Fatalf("%d deliveries (ids %v), want one with id %s", len(got), got, before.DeliveryID)
	}
	if after.Attempts != before.Attempts+1 || after.Attempts > 6 || after.DeliveredAt == nil {
		t.Fatalf("attempts %d before the crash, %d after delivery: they must carry over", before.Attempts, after.Attempts)
	}
	j := c.Job(id)
	if w := j["webhook"].(map[string]any); w["status"] != "delivered" || w["delivery_id"] != before.DeliveryID {
		t.Fatalf("job shows webhook %v", w)
	}
}
