// Package webhook is the webhook transport: the signed POST of a job object to a
// receiver, with retries, backoff and the outbound address guard. Which
// deliveries to make, and recording their outcomes on the job, is the
// dispatcher's outbox loop (dispatcher/outbox.go).
package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
)

// Attempts is the contract: 1 attempt + 5 retries.
const Attempts = 6

// Sender POSTs job objects to webhook URLs with go-retryablehttp: exponential
// backoff with jitter, Retry-After honoured, a deadline per attempt, redirects never
// followed, and every connection through a dialer that refuses private and
// link-local addresses (and loopback unless allowed).
type Sender struct {
	Base, Cap      time.Duration
	AttemptTimeout time.Duration
	AllowLoopback  bool
	// Guard is the outbound policy (server.allow_cidrs, allow_hosts); AllowLoopback
	// adds loopback to it.
	Guard netguard.Policy
	// MaxIdlePerHost is how many kept-alive connections to one receiver are kept
	// (default 16): set it to the deliveries in flight.
	MaxIdlePerHost int

	once      sync.Once
	transport *http.Transport // shared: keeps connections to receivers alive
}

func (w *Sender) httpClient() *http.Client {
	w.once.Do(func() {
		guard := w.Guard
		guard.AllowLoopback = guard.AllowLoopback || w.AllowLoopback
		w.transport = guard.Transport()
		w.transport.MaxIdleConnsPerHost = max(w.MaxIdlePerHost, 16)
		// The clone of http.DefaultTransport keeps 100 idle connections in
		// all, fewer than one busy receiver may use.
		w.transport.MaxIdleConns = 4 * w.transport.MaxIdleConnsPerHost
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
	// Slot, when set, is taken after OnAttempt, before each attempt, and given back
	// as soon as the attempt's outcome is known: the waits between attempts hold
	// none. It may fail only when ctx has ended; the attempt is then not made.
	Slot func(ctx context.Context) (release func(), err error)
}

// Backoff is the wait before retry n (1-based): Base·2^(n-1), capped at Cap, of which
// a random half to all is taken, so gaps grow while receivers are not hit in step.
func (w *Sender) Backoff(n int, r *rand.Rand) time.Duration {
	d := w.Base << (n - 1)
	if d > w.Cap || d <= 0 {
		d = w.Cap
	}
	return d/2 + time.Duration(r.Int64N(int64(d/2)+1))
}

// Send delivers m with the attempts it has left.
func (w *Sender) Send(ctx context.Context, m Message) Delivery {
	left := Attempts - m.Done
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
	// The request's own context: cancelled when no slot could be had, so that
	// attempt fails at once and nothing is sent without a slot.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The slot of the attempt in flight. The hooks below run one after another on
	// Do's goroutine: RequestLogHook before each attempt, CheckRetry after it.
	var release func()
	done := func() {
		if release != nil {
			release()
			release = nil
		}
	}
	defer done() // whatever path Do takes, no slot outlives Send
	c.RequestLogHook = func(_ retryablehttp.Logger, req *http.Request, _ int) {
		n := int(attempts.Add(1))
		if m.OnAttempt != nil {
			m.OnAttempt(n)
		}
		if m.Slot != nil {
			r, err := m.Slot(req.Context())
			if err != nil {
				cancel()
				return
			}
			release = r
		}
		// Signed once the slot is had, so the timestamp is the sending time.
		if m.Secret != "" {
			ts := strconv.FormatInt(time.Now().Unix(), 10)
			req.Header.Set("X-Mediajobs-Timestamp", ts)
			req.Header.Set("X-Mediajobs-Signature", "v1="+Sign(m.Secret, ts, m.Body))
		}
	}
	c.ResponseLogHook = func(_ retryablehttp.Logger, r *http.Response) { last.Store(int32(r.StatusCode)) }
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	// Any answer but 2xx is retried, 4xx included (a receiver mid-deploy answers
	// 404); a 3xx is final, since redirects are never followed. Transport errors
	// keep retryablehttp's judgement (a bad certificate is not retried).
	c.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if resp != nil {
			// A body closed unread closes its connection: read a short answer
			// (most receivers send one), still in the attempt's slot and time,
			// so the next delivery to the host reuses the connection.
			io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
		}
		done() // the attempt's outcome is known: the wait before the next holds no slot
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
	req.Header.Set("User-Agent", "mediajobs/"+mj.Version)
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

// maxAnswer is how much of a receiver's answer is read (and dropped) to keep
// its connection; a longer one closes the connection instead.
const maxAnswer = 64 << 10

func min64(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
