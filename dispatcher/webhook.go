package dispatcher

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/netguard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WebhookSender POSTs job objects to webhook URLs: 1 attempt + Retries retries with
// exponential backoff (Retry-After honoured), through a dialer that refuses
// private and link-local addresses.
type WebhookSender struct {
	Retries          int
	MinWait, MaxWait time.Duration
	AllowLoopback    bool
}

// Delivery is the outcome of one webhook delivery.
type Delivery struct {
	Attempts   int
	LastStatus int
	Err        error
}

// Send delivers body to url once (with retries).
func (w *WebhookSender) Send(ctx context.Context, url, event string, body []byte) Delivery {
	var attempts atomic.Int32
	var last atomic.Int32
	c := retryablehttp.NewClient()
	c.RetryMax = w.Retries
	c.RetryWaitMin, c.RetryWaitMax = w.MinWait, w.MaxWait
	c.Logger = nil
	c.HTTPClient = &http.Client{Transport: netguard.Transport(w.AllowLoopback), Timeout: 30 * time.Second}
	c.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, n int) { attempts.Store(int32(n + 1)) }
	c.ResponseLogHook = func(_ retryablehttp.Logger, r *http.Response) { last.Store(int32(r.StatusCode)) }
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Delivery{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mediajobs-webhook/1")
	req.Header.Set("X-Mediajobs-Event", event)
	req.Header.Set("X-Mediajobs-Delivery", uuid.NewString())
	resp, err := c.Do(req)
	d := Delivery{Attempts: int(attempts.Load()), LastStatus: int(last.Load()), Err: err}
	if resp != nil {
		resp.Body.Close()
		d.LastStatus = resp.StatusCode
		if resp.StatusCode/100 != 2 {
			d.Err = fmt.Errorf("receiver answered HTTP %d", resp.StatusCode)
		}
	}
	return d
}

// webhookLoop delivers every entry of the etcd outbox. The entry was written in the
// same transaction that made the job terminal, and is removed only after the
// outcome is recorded on the job, so a crash re-delivers instead of dropping.
func (d *Dispatcher) webhookLoop(ctx context.Context) {
	d.watchPrefix(ctx, d.Store.OutboxPrefix(), time.Minute, func(ctx context.Context, id string, del *clientv3.Event) {
		if del != nil {
			return
		}
		j, err := d.Store.Job(ctx, id)
		if err != nil {
			if mj.ErrorCode(err) == mj.ENotFound {
				d.Store.DeleteOutbox(ctx, id)
			}
			return
		}
		if j.Webhook != nil && j.Webhook.Status != "pending" {
			d.Store.DeleteOutbox(ctx, id) // settled before a crash
			return
		}
		exp := time.Now().Add(d.Config.Storage.TTL)
		view := mj.View(j, func(key string) string { return d.Signer.URL("GET", key, key, exp) })
		res := d.Webhook.Send(ctx, j.WebhookURL, "job."+string(j.Status), mustJSON(view))
		if ctx.Err() != nil {
			return // shutting down: the outbox entry stays for the next leader
		}
		state := &mj.WebhookState{Status: "delivered", Attempts: res.Attempts, LastHTTPStatus: res.LastStatus}
		if res.Err != nil {
			state.Status, state.LastError = "failed", res.Err.Error()
			d.Log.Warn("webhook not delivered", "job", id, "url", j.WebhookURL, "attempts", res.Attempts, "err", res.Err)
		}
		metrics.Webhooks.WithLabelValues(state.Status).Inc()
		if _, err := d.Store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Webhook = state; return nil }); err != nil {
			d.Log.Warn("record webhook outcome", "job", id, "err", err)
			return
		}
		d.Store.DeleteOutbox(ctx, id)
	})
}

// Default backoff bounds of webhook retries: 1s, 2s, 4s, 8s, 16s.
const (
	DefaultWebhookMinWait = time.Second
	DefaultWebhookMaxWait = 30 * time.Second
)
