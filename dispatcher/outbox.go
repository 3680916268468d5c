package dispatcher

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/webhook"
)

// A webhook's story: the verb that ends a job arms it (state.go), and the same
// etcd write puts the job's outbox entry (store.derivedOps); the leader's
// outbox, below, delivers every entry through webhook.Sender (webhook/), counts
// each attempt on the job before it is made, and records the outcome, which
// removes the entry.

// AccountSecrets is how the webhook loop finds an account's signing secret.
type AccountSecrets interface {
	Account(ctx context.Context, id string) (*mj.Account, error)
}

// outboxStore is what the outbox needs of the store (the term's: its writes
// are fenced).
type outboxStore interface {
	Follow(ctx context.Context, f store.Family, resync time.Duration, log *slog.Logger, fn func(ctx context.Context, id string, del *store.Deleted))
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	DeleteOutbox(ctx context.Context, id string) error
}

// outbox delivers the webhooks of the etcd outbox for one leadership term
// (newOutbox): its own state, its own store, nothing else of the dispatcher's.
type outbox struct {
	store   outboxStore
	sender  *webhook.Sender
	links   blob.Links
	cfg     *config.Webhooks
	linkTTL time.Duration // of the output links in a webhook's job view
	log     *slog.Logger
	// Deliveries read and write their jobs, and read their accounts' signing
	// secrets, in groups (see group): in a burst, many share one etcd
	// transaction. Up to writeGroups write transactions of 64 jobs each may be
	// in flight, so a backlog is not held to one commit at a time.
	reads   *group[string, *mj.Job]
	writes  *group[store.JobUpdate, *mj.Job]
	secrets *group[secretRead, secretAnswer] // nil: never sign
}

// writeGroups is how many of the outbox's write transactions may be in flight.
const writeGroups = 4

// newOutbox is the outbox of the term this dispatcher leads: its writes go
// through the term's store (d.updateJobs), as every other loop's.
func (d *Dispatcher) newOutbox() *outbox {
	st := d.st()
	o := &outbox{
		store: st, sender: d.Webhook, links: d.links(),
		cfg: d.Config.Webhooks, linkTTL: d.Config.Storage.TTL, log: d.Log,
		reads: &group[string, *mj.Job]{run: st.Jobs, key: func(id string) string { return id }, max: 100, log: d.Log},
	}
	o.writes = &group[store.JobUpdate, *mj.Job]{run: d.settle.updateJobs, key: func(u store.JobUpdate) string { return u.ID }, max: 64, par: writeGroups, log: d.Log}
	if d.Accounts != nil {
		o.secrets = &group[secretRead, secretAnswer]{run: readSecrets(d.Accounts), key: secretRead.key, max: 256, log: d.Log}
	}
	return o
}

// webhookLoop runs the term's outbox until ctx ends.
func (d *Dispatcher) webhookLoop(ctx context.Context) { d.newOutbox().run(ctx) }

// run delivers every entry of the etcd outbox (see hookLimits for how many at
// once). The entry was written in the same transaction that made the job
// terminal; each attempt is counted on the job before it is made, and the entry
// is removed only after the outcome is recorded, so a crash or failover resumes
// the delivery with the attempts it has left, under the same delivery id.
func (o *outbox) run(ctx context.Context) {
	h := newHookLimits(o.cfg.Concurrency, o.cfg.AccountConcurrency)
	var inflight sync.Map // ids in progress or parked: passes skip them
	var wg sync.WaitGroup
	defer wg.Wait()
	o.store.Follow(ctx, store.Outbox, time.Minute, o.log, func(ctx context.Context, id string, del *store.Deleted) {
		if del != nil {
			return
		}
		if _, busy := inflight.LoadOrStore(id, true); busy {
			return
		}
		select {
		case h.running <- struct{}{}:
		case <-ctx.Done():
			inflight.Delete(id)
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-h.running; wg.Done() }()
			j := o.pending(ctx, id)
			if j == nil {
				inflight.Delete(id)
				return
			}
			a := h.start(j.AccountID, id)
			if a == nil {
				return // parked: one of the account's deliveries runs it when it ends
			}
			slot := func(ctx context.Context) (func(), error) { return h.slot(ctx, a) }
			for {
				if j != nil {
					o.deliver(ctx, j, slot)
				}
				inflight.Delete(id)
				if id = h.next(a); id == "" || ctx.Err() != nil {
					return
				}
				j = o.pending(ctx, id)
			}
		}()
	})
}

// hookLimits keeps one account's dead or slow receiver from delaying the other
// accounts' deliveries.
//
// Attempts in flight (each holds a connection for up to attempt_timeout) are at
// most webhooks.concurrency, and one account's at most an eighth of them (at least
// one), so the others always find free slots. A slot is held only during an
// attempt, never during the wait before the next.
//
// Deliveries in progress (a goroutine and the job each, mostly waiting) are at most
// 32×concurrency, and one account's at most an eighth of them (4×concurrency): an
// account's further deliveries are parked, by id only, and run one by one as its
// own deliveries end. A delivery spends most of its time waiting for etcd (its
// job read, its attempt counted, its outcome recorded, each in a shared
// transaction), so one account's burst needs many in progress to keep its
// attempt slots busy (docs/benchmarks.md, webhooks).
type hookLimits struct {
	running  chan struct{} // deliveries in progress, all accounts
	slots    chan struct{} // attempts in flight, all accounts
	perRun   int
	perSlots int

	mu sync.Mutex
	// Only accounts with a delivery in progress have an entry.
	accounts map[string]*hookAccount
}

// progressPerSlot is the deliveries one account may have in progress per attempt
// slot in all (see hookLimits).
const progressPerSlot = 4

type hookAccount struct {
	id      string
	running int
	parked  []string      // outbox ids waiting for one of running to end
	slots   chan struct{} // the account's attempts in flight
}

// newHookLimits: concurrency attempts in all, perAccount of them for one account
// (0: an eighth of concurrency, at least one); progressPerSlot×concurrency
// deliveries in progress for one account, 8 times that in all.
func newHookLimits(concurrency, perAccount int) *hookLimits {
	c := max(concurrency, 1)
	if perAccount <= 0 || perAccount > c {
		perAccount = max(1, c/8)
	}
	return &hookLimits{running: make(chan struct{}, 8*progressPerSlot*c), slots: make(chan struct{}, c),
		perRun: progressPerSlot * c, perSlots: perAccount, accounts: map[string]*hookAccount{}}
}

// start counts a delivery of the account as in progress, or parks its id and
// returns nil when the account already has its share in progress.
func (h *hookLimits) start(account, id string) *hookAccount {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.accounts[account]
	if a == nil {
		a = &hookAccount{id: account, slots: make(chan struct{}, h.perSlots)}
		h.accounts[account] = a
	}
	if a.running >= h.perRun {
		a.parked = append(a.parked, id)
		return nil
	}
	a.running++
	return a
}

// next ends a delivery of a: it returns the account's next parked id, which takes
// the ended one's place, or "" (and forgets the account once none is in progress).
func (h *hookLimits) next(a *hookAccount) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(a.parked) > 0 {
		id := a.parked[0]
		if a.parked = a.parked[1:]; len(a.parked) == 0 {
			a.parked = nil
		}
		return id
	}
	if a.running--; a.running == 0 {
		delete(h.accounts, a.id)
	}
	return ""
}

// slot waits for an attempt slot of a's: its account's first, so at most its
// share of one account's attempts ever wait in the shared queue, then a shared
// one. It fails only when ctx ends.
func (h *hookLimits) slot(ctx context.Context, a *hookAccount) (func(), error) {
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		<-a.slots
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { <-h.slots; <-a.slots }) }, nil
}

// pending reads the job of an outbox entry. It returns nil when there is
// nothing to send (a stale entry is removed) or the read failed (the entry stays
// for the next pass).
func (o *outbox) pending(ctx context.Context, id string) *mj.Job {
	j, err := o.reads.Do(ctx, id)
	if err != nil {
		if mj.ErrorCode(err) == mj.ENotFound {
			o.store.DeleteOutbox(ctx, id)
		}
		return nil
	}
	if w := j.Webhook; w == nil || w.Status != mj.WebhookPending || j.WebhookURL == "" {
		o.store.DeleteOutbox(ctx, id) // settled before a crash
		return nil
	}
	return j
}

// secretRetry is the first wait after a failed read of a signing secret (then
// doubled); after secretTries reads the delivery waits for the loop's next pass.
const secretRetry, secretTries = 500 * time.Millisecond, 4

// secret reads the account's signing secret: "" when the account has none,
// or no longer exists. An account with a secret must never be sent an unsigned
// webhook, so any other failure is an error: the caller sends nothing.
func (o *outbox) secret(ctx context.Context, account string) (string, error) {
	if o.secrets == nil {
		return "", nil
	}
	for try := 1; ; try++ {
		ans, err := o.secrets.Do(ctx, secretRead{account: account, n: secretReads.Add(1)})
		if err == nil {
			err = ans.err
		}
		a := ans.account
		switch {
		case err == nil && a != nil:
			return a.WebhookSecret, nil
		case err == nil || mj.ErrorCode(err) == mj.ENotFound:
			return "", nil
		case try == secretTries || ctx.Err() != nil:
			return "", err
		}
		sleep(ctx, secretRetry<<(try-1))
	}
}

// secretRead is one delivery's read of its account (n: unique, so that one
// group holds every delivery that waits, several of one account among them).
type secretRead struct {
	account string
	n       uint64
}

func (r secretRead) key() string { return strconv.FormatUint(r.n, 10) }

var secretReads atomic.Uint64

type secretAnswer struct {
	account *mj.Account
	err     error
}

// readSecrets reads each account of a group once (secretReadsInFlight at a
// time): in a burst, the deliveries of one account share one read instead of
// one each. A group's read starts after its deliveries asked, so a secret set
// or changed still takes effect at once.
func readSecrets(accts AccountSecrets) func(context.Context, []secretRead) ([]secretAnswer, []error) {
	return func(ctx context.Context, rs []secretRead) ([]secretAnswer, []error) {
		index := map[string]int{} // account -> its answer in read
		for _, r := range rs {
			if _, ok := index[r.account]; !ok {
				index[r.account] = len(index)
			}
		}
		read := make([]secretAnswer, len(index))
		var wg sync.WaitGroup
		sem := make(chan struct{}, secretReadsInFlight)
		for account, k := range index {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				read[k].account, read[k].err = accts.Account(ctx, account)
			}()
		}
		wg.Wait()
		outs, errs := make([]secretAnswer, len(rs)), make([]error, len(rs))
		for i, r := range rs {
			outs[i] = read[index[r.account]]
		}
		return outs, errs
	}
}

const secretReadsInFlight = 16

// deliver sends j's pending webhook, each attempt in a slot from slot, and records
// the outcome.
func (o *outbox) deliver(ctx context.Context, j *mj.Job, slot func(context.Context) (func(), error)) {
	id, w := j.ID, j.Webhook
	secret, err := o.secret(ctx, j.AccountID)
	if err != nil {
		// Before any attempt, holding no slot: the entry stays in the outbox and the
		// loop's next pass (within a minute) tries again.
		if ctx.Err() == nil {
			o.log.Warn("webhook not sent: the account's signing secret could not be read; the next pass tries again",
				"job", id, "account", j.AccountID, "err", err)
		}
		return
	}
	exp := time.Now().Add(o.linkTTL)
	links := o.links
	view := mj.View(j, func(key string) string { return links.Download(ctx, key, exp) })
	// The webhook writes go through the group writer, each from the job as last
	// written: in a burst, many deliveries share one etcd transaction and none
	// reads the job again.
	last := j
	// An attempt whose count cannot be stored is not made: after a crash the next
	// leader must never find fewer attempts recorded than were sent.
	sctx, abort := context.WithCancel(ctx)
	defer abort()
	var aborted error
	res := o.sender.Send(sctx, webhook.Message{
		URL: j.WebhookURL, Event: "job." + string(j.Status), DeliveryID: w.DeliveryID,
		Body: mustJSON(view), Secret: secret, Done: w.Attempts, Slot: slot,
		OnAttempt: func(n int) {
			nj, err := o.writes.Do(ctx, store.JobUpdate{ID: id, From: last, Fn: func(j *mj.Job) error {
				if j.Webhook == nil || j.Webhook.Status != mj.WebhookPending {
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
		o.store.DeleteOutbox(ctx, id) // settled elsewhere meanwhile
		return
	}
	if aborted != nil || ctx.Err() != nil {
		// Deposed, shutting down, or etcd failed: the outbox entry stays, and this
		// leader's next pass or the next leader goes on with the attempts left.
		if aborted != nil && ctx.Err() == nil {
			o.log.Warn("webhook attempt not counted; not sent", "job", id, "err", aborted)
		}
		return
	}
	for try := 0; ; try++ {
		_, err = o.writes.Do(ctx, store.JobUpdate{ID: id, From: last, Fn: func(j *mj.Job) error {
			if j.Webhook == nil || j.Webhook.Status != mj.WebhookPending {
				return errSkip
			}
			ws := *j.Webhook
			ws.Attempts, ws.LastHTTPStatus, ws.LastError = max(ws.Attempts, res.Attempts), res.LastStatus, ""
			if res.Err == nil {
				now := time.Now().UTC()
				ws.Status, ws.DeliveredAt = mj.WebhookDelivered, &now
			} else {
				ws.Status, ws.LastError = mj.WebhookFailed, res.Err.Error()
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
		o.log.Warn("record webhook outcome", "job", id, "err", err)
		return
	}
	// Recording the outcome removed the outbox entry (store: a derived key).
	outcome := "delivered"
	if res.Err != nil {
		outcome = "failed"
		// The URL may be the receiver's credential (Zapier, Make, n8n): host only.
		o.log.Warn("webhook not delivered", "job", id, "url", mj.HostOnlyURL(j.WebhookURL), "attempts", res.Attempts,
			"err", mj.RedactHostOnly(res.Err.Error(), j.WebhookURL))
	}
	metrics.Webhooks.WithLabelValues(outcome).Inc()
	if j.FinishedAt != nil {
		metrics.WebhookLatency.WithLabelValues(outcome).Observe(max(time.Since(*j.FinishedAt), 0).Seconds())
	}
	if err == errSkip {
		o.store.DeleteOutbox(ctx, id) // settled by someone else: the entry is stale
	}
}
