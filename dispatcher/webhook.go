package dispatcher

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/netguard"
	"github.com/mediajobs/mediajobs/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WebhookAttempts is the contract: 1 attempt + 5 retries.
const WebhookAttempts = 6

// Version goes into the webhook User-Agent.
var Version = "dev"

// WebhookSender POSTs job objects to webhook URLs with go-retryablehttp: exponential
// backoff with jitter, Retry-After honoured, a deadline per attempt, redirects never
// followed, and every connection through a dialer that refuses private and
// link-local addresses (and loopback unless allowed).
type WebhookSender struct {
	Base, Cap      time.Duration
	AttemptTimeout time.Duration
	AllowLoopback  bool
	// MaxIdlePerHost is how many kept-alive connections to one receiver are kept
	// (default 16): set it to the deliveries in flight.
	MaxIdlePerHost int

	once      sync.Once
	transport *http.Transport // shared: keeps connections to receivers alive
}

func (w *WebhookSender) httpClient() *http.Client {
	w.once.Do(func() {
		w.transport = netguard.Transport(w.AllowLoopback)
		w.transport.MaxIdleConnsPerHost = max(w.MaxIdlePerHost, 16)
	})
	return &http.Client{
		Transport: w.transport,
		Timeout:   w.AttemptTimeout,
		// A redirect could point anywhere, the SSRF guard's checks included: never follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Delivery is the outcome of Send.
type Delivery struct {
	Attempts   int // in all, including earlier ones
	LastStatus int
	Err        error
}

// Message is one webhook delivery.
type Message struct {
	URL, Event, DeliveryID string
	Body                   []byte
	// Secret, when set, signs each attempt: X-Mediajobs-Signature.
	Secret string
	// Done is how many attempts earlier runs already made (after a restart).
	Done int
	// OnAttempt is called before each attempt with its number (1-based, in all).
	OnAttempt func(n int)
}

// Backoff is the wait before retry n (1-based): Base·2^(n-1), capped at Cap, of which
// a random half to all is taken, so gaps grow while receivers are not hit in step.
func (w *WebhookSender) Backoff(n int, r *rand.Rand) time.Duration {
	d := w.Base << (n - 1)
	if d > w.Cap || d <= 0 {
		d = w.Cap
	}
	return d/2 + time.Duration(r.Int64N(int64(d/2)+1))
}

// Send delivers m with the attempts it has left.
func (w *WebhookSender) Send(ctx context.Context, m Message) Delivery {
	left := WebhookAttempts - m.Done
	if left <= 0 {
		return Delivery{Attempts: m.Done, Err: fmt.Errorf("no attempts left")}
	}
	var attempts, last atomic.Int32
	attempts.Store(int32(m.Done))
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	var rmu sync.Mutex
	c := retryablehttp.NewClient()
	c.RetryMax = left - 1
	c.Logger = nil
	c.HTTPClient = w.httpClient()
	c.Backoff = func(min, max time.Duration, n int, resp *http.Response) time.Duration {
		if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				return min64(time.Duration(s)*time.Second, w.Cap)
			}
		}
		rmu.Lock()
		defer rmu.Unlock()
		return w.Backoff(n+1, rnd)
	}
	c.RequestLogHook = func(_ retryablehttp.Logger, req *http.Request, _ int) {
		n := int(attempts.Add(1))
		if m.Secret != "" {
			ts := strconv.FormatInt(time.Now().Unix(), 10)
			req.Header.Set("X-Mediajobs-Timestamp", ts)
			req.Header.Set("X-Mediajobs-Signature", "v1="+Sign(m.Secret, ts, m.Body))
		}
		if m.OnAttempt != nil {
			m.OnAttempt(n)
		}
	}
	c.ResponseLogHook = func(_ retryablehttp.Logger, r *http.Response) { last.Store(int32(r.StatusCode)) }
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	// Any answer but 2xx is retried, 4xx included (a receiver mid-deploy answers
	// 404); a 3xx is final, since redirects are never followed. Transport errors
	// keep retryablehttp's judgement (a bad certificate is not retried).
	c.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if err != nil {
			return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
		}
		return resp.StatusCode/100 != 2 && resp.StatusCode/100 != 3, nil
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return Delivery{Attempts: m.Done, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mediajobs/"+Version)
	req.Header.Set("X-Mediajobs-Event", m.Event)
	req.Header.Set("X-Mediajobs-Delivery", m.DeliveryID)
	resp, err := c.Do(req)
	d := Delivery{Attempts: int(attempts.Load()), LastStatus: int(last.Load()), Err: err}
	if resp != nil {
		resp.Body.Close()
		d.LastStatus = resp.StatusCode
		switch {
		case resp.StatusCode/100 == 3:
			d.Err = fmt.Errorf("receiver answered HTTP %d; redirects are not followed", resp.StatusCode)
		case resp.StatusCode/100 != 2:
			d.Err = fmt.Errorf("receiver answered HTTP %d", resp.StatusCode)
		}
	}
	return d
}

func min64(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// Sign is the webhook signature: hex HMAC-SHA256 of "<timestamp>.<body>" with the
// account's secret. Receivers recompute it and compare in constant time.
func Sign(secret, timestamp string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(timestamp + "."))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// AccountSecrets is how the webhook loop finds an account's signing secret.
type AccountSecrets interface {
	Account(ctx context.Context, id string) (*mj.Account, error)
}

// webhookLoop delivers every entry of the etcd outbox, up to Concurrency at once.
// The entry was written in the same transaction that made the job terminal; each
// attempt is counted on the job before it is made, and the entry is removed only
// after the outcome is recorded, so a crash or failover resumes the delivery with
// the attempts it has left, under the same delivery id.
func (d *Dispatcher) webhookLoop(ctx context.Context) {
	sem := make(chan struct{}, d.Config.Webhooks.Concurrency)
	var inflight sync.Map
	var wg sync.WaitGroup
	defer wg.Wait()
	d.watchPrefix(ctx, d.Store.OutboxPrefix(), time.Minute, func(ctx context.Context, id string, del *clientv3.Event) {
		if del != nil {
			return
		}
		if _, busy := inflight.LoadOrStore(id, true); busy {
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			inflight.Delete(id)
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; inflight.Delete(id); wg.Done() }()
			d.deliver(ctx, id)
		}()
	})
}

func (d *Dispatcher) deliver(ctx context.Context, id string) {
	j, err := d.hookReads.Do(ctx, id)
	if err != nil {
		if mj.ErrorCode(err) == mj.ENotFound {
			d.Store.DeleteOutbox(ctx, id)
		}
		return
	}
	w := j.Webhook
	if w == nil || w.Status != "pending" || j.WebhookURL == "" {
		d.Store.DeleteOutbox(ctx, id) // settled before a crash
		return
	}
	var secret string
	if d.Accounts != nil {
		if a, err := d.Accounts.Account(ctx, j.AccountID); err == nil {
			secret = a.WebhookSecret
		}
	}
	exp := time.Now().Add(d.Config.Storage.TTL)
	view := mj.View(j, func(key string) string { return d.Signer.URL("GET", key, key, exp) })
	// The webhook writes go through the group writer, each from the job as last
	// written: in a burst, many deliveries share one etcd transaction and none
	// reads the job again.
	last := j
	// An attempt whose count cannot be stored is not made: after a crash the next
	// leader must never find fewer attempts recorded than were sent.
	sctx, abort := context.WithCancel(ctx)
	defer abort()
	var aborted error
	res := d.Webhook.Send(sctx, Message{
		URL: j.WebhookURL, Event: "job." + string(j.Status), DeliveryID: w.DeliveryID,
		Body: mustJSON(view), Secret: secret, Done: w.Attempts,
		OnAttempt: func(n int) {
			nj, err := d.hookWrites.Do(ctx, store.JobUpdate{ID: id, From: last, Fn: func(j *mj.Job) error {
				if j.Webhook == nil || j.Webhook.Status != "pending" {
					return errSkip
				}
				j.Webhook.Attempts = max(j.Webhook.Attempts, n)
				return nil
			}})
			if err != nil {
				aborted = err
				abort()
				return
			}
			last = nj
		},
	})
	if aborted == errSkip {
		d.Store.DeleteOutbox(ctx, id) // settled elsewhere meanwhile
		return
	}
	if aborted != nil || ctx.Err() != nil {
		// Deposed, shutting down, or etcd failed: the outbox entry stays, and this
		// leader's next pass or the next leader goes on with the attempts left.
		if aborted != nil && ctx.Err() == nil {
			d.Log.Warn("webhook attempt not counted; not sent", "job", id, "err", aborted)
		}
		return
	}
	for try := 0; ; try++ {
		_, err = d.hookWrites.Do(ctx, store.JobUpdate{ID: id, From: last, Fn: func(j *mj.Job) error {
			if j.Webhook == nil || j.Webhook.Status != "pending" {
				return errSkip
			}
			ws := *j.Webhook
			ws.Attempts, ws.LastHTTPStatus, ws.LastError = max(ws.Attempts, res.Attempts), res.LastStatus, ""
			if res.Err == nil {
				now := time.Now().UTC()
				ws.Status, ws.DeliveredAt = "delivered", &now
			} else {
				ws.Status, ws.LastError = "failed", res.Err.Error()
			}
			j.Webhook = &ws
			return nil
		}})
		// A lost outcome would send the delivery again at the next pass: retry a
		// transient etcd error a few times first.
		if err == nil || err == errSkip || try == 2 || ctx.Err() != nil {
			break
		}
		last = nil
		sleep(ctx, time.Duration(try+1)*500*time.Millisecond)
	}
	if err != nil && err != errSkip {
		d.Log.Warn("record webhook outcome", "job", id, "err", err)
		return
	}
	// Recording the outcome removed the outbox entry (store: a derived key).
	if res.Err != nil {
		metrics.Webhooks.WithLabelValues("failed").Inc()
		d.Log.Warn("webhook not delivered", "job", id, "url", j.WebhookURL, "attempts", res.Attempts, "err", res.Err)
	} else {
		metrics.Webhooks.WithLabelValues("delivered").Inc()
	}
	if err == errSkip {
		d.Store.DeleteOutbox(ctx, id) // settled by someone else: the entry is stale
	}
}
