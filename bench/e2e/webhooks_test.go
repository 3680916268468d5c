package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/webhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// parkedMachine is the machine of the webhook benchmark's jobs: no pool has that
// name, so the dispatcher never dispatches them; they go from queued straight to
// succeeded (an allowed transition) by store.UpdateJob, which writes the outbox
// entry in the same transaction, exactly as the event loop's transition does.
const parkedMachine = "webhook-bench"

// hookReceiver is the loopback webhook receiver: it records when each delivery's
// body was read, by the job index in its URL path (/hook/<round>/<i>).
type hookReceiver struct {
	srv  *http.Server
	url  string
	mu   sync.Mutex
	at   map[string]time.Time // "<round>/<i>" -> receipt
	dups int
	body []byte // one delivered body, for the send-only baselines
	got  chan struct{}
}

func startReceiver() (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{url: "http://" + ln.Addr().String(), at: map[string]time.Time{}, got: make(chan struct{}, 1)}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	now := time.Now()
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	key, ok := strings.CutPrefix(req.URL.Path, "/hook/")
	if ok && req.Header.Get("X-Mediajobs-Event") == "job.succeeded" {
		r.mu.Lock()
		if _, seen := r.at[key]; seen {
			r.dups++ // at-least-once: a redelivery under the same id
		} else {
			r.at[key] = now
		}
		if r.body == nil {
			r.body = body
		}
		r.mu.Unlock()
		select {
		case r.got <- struct{}{}:
		default:
		}
	}
	w.WriteHeader(http.StatusOK)
}

// waitFor waits until every key has been received and returns the receipt times.
func (r *hookReceiver) waitFor(ctx context.Context, keys []string) ([]time.Time, error) {
	for {
		r.mu.Lock()
		at := make([]time.Time, len(keys))
		missing := 0
		for i, k := range keys {
			if at[i] = r.at[k]; at[i].IsZero() {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return at, nil
		}
		select {
		case <-r.got:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d webhooks not received: %w", missing, len(keys), ctx.Err())
		}
	}
}

func (r *hookReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.srv.Shutdown(ctx)
}

// outboxSeen is an etcd watch of the outbox prefix, as the dispatcher's: it
// records when each job's outbox entry became visible to a watcher, which splits
// the delivery latency into "etcd commit + watch" and "the dispatcher's delivery".
type outboxSeen struct {
	mu sync.Mutex
	at map[string]time.Time
}

func watchOutbox(ctx context.Context, cli *clientv3.Client, outboxPrefix string) *outboxSeen {
	o := &outboxSeen{at: map[string]time.Time{}}
	ready := make(chan struct{})
	go func() {
		w := cli.Watch(clientv3.WithRequireLeader(ctx), outboxPrefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		close(ready)
		for resp := range w {
			now := time.Now()
			o.mu.Lock()
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut && ev.IsCreate() {
					o.at[strings.TrimPrefix(string(ev.Kv.Key), outboxPrefix)] = now
				}
			}
			o.mu.Unlock()
		}
	}()
	<-ready
	return o
}

func (o *outboxSeen) get(id string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.at[id]
}

// hookJobs creates n queued jobs whose webhook points at the receiver (untimed).
func (e *env) hookJobs(ctx context.Context, recv *hookReceiver, round string, n int) ([]string, []string, error) {
	ids, keys := make([]string, n), make([]string, n)
	_, err := posts(n, 32, func(i int) error {
		now := time.Now().UTC()
		keys[i] = round + "/" + strconv.Itoa(i)
		j := &mj.Job{
			ID: uuid.NewString(), AccountID: account, Status: mj.StatusQueued,
			InputFiles:     map[string]string{},
			OutputNames:    []string{"o.wav"},
			FFmpegCommands: []string{"-f lavfi -i sine=duration=0.1 outputs/o.wav"},
			WebhookURL:     recv.url + "/hook/" + keys[i],
			Machine:        parkedMachine, TimeoutSeconds: 3600,
			CreatedAt: now, QueuedAt: now, UpdatedAt: now,
		}
		ids[i] = j.ID
		return e.st.CreateJob(ctx, j)
	})
	if err != nil {
		return nil, nil, err
	}
	return ids, keys, nil
}

// succeed is the terminal transition, as the event loop writes it for a job whose
// runner reported one output.
func (e *env) succeed(ctx context.Context, id string) error {
	_, err := e.st.UpdateJob(ctx, id, func(j *mj.Job) error {
		now := time.Now().UTC()
		dur := 0.1
		j.Status, j.StartedAt, j.FinishedAt, j.StatusDetail = mj.StatusSucceeded, &now, &now, ""
		j.Outputs = []mj.Output{{Name: "o.wav", Key: "jobs/" + id + "/1/outputs/o.wav", Size: 8878,
			Probe: &mj.Probe{DurationSeconds: &dur, Format: "wav", Streams: []mj.Stream{{Type: "audio", Codec: "pcm_s16le"}}}}}
		j.TotalOutputBytes = 8878
		return nil
	})
	return err
}

// BenchmarkWebhooks makes *hooks* jobs terminal while the leading dispatcher's
// webhook loop delivers them to a loopback receiver, twice:
//
//   - burst: from *writers* goroutines at once, so a backlog forms: deliveries per
//     second (first transition to last receipt) and the median and 95th percentile
//     of terminal transition → receipt (and of transition → the outbox entry seen
//     by an etcd watch like the loop's);
//   - sequential: from one goroutine, back to back (*pace* apart), the way the
//     dispatcher's event loop, which applies Nomad events one at a time, finishes
//     jobs: the same percentiles.
//
// Beside them, in the same run: the same body POSTed *hooks* times by
// webhook.Sender.Send alone and by a plain keep-alive net/http client,
// each from as many goroutines as the loop delivers at once (webhooks.concurrency).
func BenchmarkWebhooks(b *testing.B) {
	e := getEnv(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recv, err := startReceiver()
	if err != nil {
		b.Fatal(err)
	}
	defer recv.close()
	seen := watchOutbox(ctx, e.st.Client(), e.st.OutboxPrefix())

	var lat, toOutbox, seqLat []time.Duration
	var rates, transRates, cpuPer, revsPer []float64
	b.ResetTimer()
	for round := range b.N {
		// The burst.
		b.StopTimer()
		ids, keys, err := e.hookJobs(ctx, recv, fmt.Sprintf("burst%d", round), *hooks)
		if err != nil {
			b.Fatal(err)
		}
		rev0, err := e.st.Revision(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cpu0 := selfCPU()
		b.StartTimer()
		trans, err := e.terminal(ctx, ids, *writers, 0)
		if err != nil {
			b.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
		at, err := recv.waitFor(wctx, keys)
		wcancel()
		if err != nil {
			b.Fatal(err)
		}
		// This process's CPU (the loop, etcd, the receiver and the transitions
		// themselves) and etcd's revisions besides the transitions, per delivery:
		// neither depends much on how busy the machine is.
		if err := waitOutboxEmpty(ctx, e); err != nil {
			b.Fatal(err)
		}
		cpuPer = append(cpuPer, ms(selfCPU()-cpu0)/float64(len(ids)))
		rev1, err := e.st.Revision(ctx)
		if err != nil {
			b.Fatal(err)
		}
		revsPer = append(revsPer, float64(rev1-rev0-int64(len(ids)))/float64(len(ids)))
		firstT, lastT, lastR := trans[0], trans[0], at[0]
		for i := range at {
			lat = append(lat, at[i].Sub(trans[i]))
			if s := seen.get(ids[i]); !s.IsZero() {
				toOutbox = append(toOutbox, s.Sub(trans[i]))
			}
			firstT, lastT = minTime(firstT, trans[i]), maxTime(lastT, trans[i])
			lastR = maxTime(lastR, at[i])
		}
		rates = append(rates, float64(len(ids))/lastR.Sub(firstT).Seconds())
		transRates = append(transRates, float64(len(ids))/lastT.Sub(firstT).Seconds())

		// Sequential: one transition at a time.
		b.StopTimer()
		ids, keys, err = e.hookJobs(ctx, recv, fmt.Sprintf("seq%d", round), *hooks)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if trans, err = e.terminal(ctx, ids, 1, *paceGap); err != nil {
			b.Fatal(err)
		}
		wctx, wcancel = context.WithTimeout(ctx, 5*time.Minute)
		at, err = recv.waitFor(wctx, keys)
		wcancel()
		if err != nil {
			b.Fatal(err)
		}
		for i := range at {
			seqLat = append(seqLat, at[i].Sub(trans[i]))
		}
	}
	b.StopTimer()

	// Baselines: the same body, POSTed by the sender alone, and by plain net/http.
	recv.mu.Lock()
	body := recv.body
	recv.mu.Unlock()
	conc := e.cfg.Webhooks.Concurrency
	sender := e.disp.Webhook
	sendRate, err := posts(*hooks, conc, func(i int) error {
		d := sender.Send(ctx, webhook.Message{URL: recv.url + "/base/send", Event: "job.succeeded",
			DeliveryID: strconv.Itoa(i), Body: body})
		return d.Err
	})
	if err != nil {
		b.Fatal("webhook.Sender.Send: ", err)
	}
	plain := newClient(conc)
	httpRate, err := posts(*hooks, conc, func(int) error {
		resp, err := plain.Post(recv.url+"/base/http", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		b.Fatal("net/http: ", err)
	}
	plain.CloseIdleConnections()

	b.ReportMetric(mean(rates), "deliveries/s")
	b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(lat, 0.95)), "p95-ms")
	b.ReportMetric(mean(transRates), "transitions/s")
	b.ReportMetric(ms(quantile(toOutbox, 0.5)), "outbox-p50-ms")
	b.ReportMetric(ms(quantile(seqLat, 0.5)), "seq-p50-ms")
	b.ReportMetric(ms(quantile(seqLat, 0.95)), "seq-p95-ms")
	b.ReportMetric(sendRate, "send/s")
	b.ReportMetric(mean(cpuPer), "cpu-ms/delivery")
	b.ReportMetric(mean(revsPer), "revs/delivery")
	b.ReportMetric(httpRate, "http/s")
	recv.mu.Lock()
	if recv.dups > 0 {
		b.Logf("%d webhooks were delivered twice (at least once)", recv.dups)
	}
	recv.mu.Unlock()
}

// waitOutboxEmpty waits until every delivery received has been recorded
// (the outbox entry goes with the outcome's write).
func waitOutboxEmpty(ctx context.Context, e *env) error {
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := e.st.Count(ctx, e.st.OutboxPrefix())
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d webhooks still in the outbox a minute after their receipt", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminal makes the jobs succeeded from n goroutines, each transition gap after
// the last one of its goroutine, and returns when each transition began (taken
// just before its store.UpdateJob).
func (e *env) terminal(ctx context.Context, ids []string, n int, gap time.Duration) ([]time.Time, error) {
	trans := make([]time.Time, len(ids))
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) || first.Load() != nil {
					return
				}
				trans[i] = time.Now()
				if err := e.succeed(ctx, ids[i]); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				if gap > 0 {
					time.Sleep(gap)
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return nil, *p
	}
	return trans, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// posts calls op n times (i = 0…n-1) from conc goroutines, stopping at the first
// error, and returns calls per second.
func posts(n, conc int, op func(i int) error) (float64, error) {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := op(i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return 0, *p
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
