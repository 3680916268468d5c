package dispatcher

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

// listCountingJobs counts the job list reads, the quiet stream's checks among them.
type listCountingJobs struct {
	NomadJobs
	lists atomic.Int32
}

func (c *listCountingJobs) List(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
	c.lists.Add(1)
	return c.NomadJobs.List(q)
}

// countingEvents counts the event streams opened: one per (re)connect.
type countingEvents struct {
	NomadEvents
	streams atomic.Int32
}

func (c *countingEvents) Stream(ctx context.Context, topics map[api.Topic][]string, index uint64, q *api.QueryOptions) (<-chan *api.Events, error) {
	c.streams.Add(1)
	return c.NomadEvents.Stream(ctx, topics, index, q)
}

// warnings keeps the messages logged at Warn and above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// followQuiet runs follow on a stream that never delivers anything (as Nomad's
// api client shows an idle cluster: heartbeats swallowed) and returns a channel
// closed when follow gives the stream up.
func followQuiet(t *testing.T, ctx context.Context, d *Dispatcher) <-chan struct{} {
	t.Helper()
	work := newPartitions(1, 1)
	t.Cleanup(work.close)
	done := make(chan struct{})
	backoff := time.Second
	go func() {
		defer close(done)
		d.track.follow(ctx, make(chan *api.Events), work, newWatermark(1), &backoff)
	}()
	return done
}

// A stream that stays quiet while Nomad answers is an idle cluster: it is kept
// through many idle periods, with no warning.
func TestQuietStreamIsKeptWhileNomadAnswers(t *testing.T) {
	n := newNomadDouble(t)
	d, ctx := doubleDispatcher(t, n, &fakeBlobs{}, 1)
	w := &warnings{}
	jobs := &listCountingJobs{NomadJobs: d.Jobs}
	d.Jobs, d.Log, d.StreamIdle = jobs, slog.New(w), 50*time.Millisecond
	rewire(d)
	ctx, cancel := context.WithCancel(ctx)
	done := followQuiet(t, ctx, d)
	testenv.Eventually(t, 30*time.Second, "five idle checks", func() bool {
		select {
		case <-done:
			return true // a failure, reported below
		default:
			return jobs.lists.Load() >= 5
		}
	})
	select {
	case <-done:
		t.Fatal("follow gave up a quiet stream although Nomad answers")
	default:
	}
	if ws := w.all(); len(ws) > 0 {
		t.Fatalf("warnings for an idle cluster: %q", ws)
	}
	cancel()
	<-done
}

// A quiet stream of a Nomad that does not answer (the agent is gone, or hangs) is
// given up, with a warning, so that the event loop reconnects.
func TestSilentStreamOfADeadNomadReconnects(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	for name, addr := range map[string]string{"refusing": gone, "hanging": hung.URL} {
		t.Run(name, func(t *testing.T) {
			n := newNomadDouble(t)
			d, ctx := doubleDispatcher(t, n, &fakeBlobs{}, 1)
			c, err := api.NewClient(&api.Config{Address: addr})
			if err != nil {
				t.Fatal(err)
			}
			w := &warnings{}
			d.Jobs, d.Log, d.StreamIdle, d.CallTimeout = c.Jobs(), slog.New(w), 50*time.Millisecond, 200*time.Millisecond
			rewire(d)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			select {
			case <-followQuiet(t, ctx, d):
			case <-time.After(30 * time.Second): // a bound on a hung test, not a timing assertion
				t.Fatal("follow kept a silent stream of a Nomad that does not answer")
			}
			ws := w.all()
			if len(ws) != 1 || !strings.Contains(ws[0], "not answering") {
				t.Fatalf("warnings: %q", ws)
			}
		})
	}
}

// Against a real Nomad dev agent with nothing to do, the event stream stays the
// one first opened through many idle periods (shortened to a second), and nothing
// is logged at Warn.
func TestIdleNomadKeepsItsEventStream(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1})
	events := &countingEvents{NomadEvents: r.agent.Client.EventStream()}
	var log testenv.LogBuffer
	d := &Dispatcher{
		Config: r.cfg, Store: r.store, Jobs: r.agent.Client.Jobs(), Allocs: r.agent.Client.Allocations(), Events: events,
		Blobs: r.blobs, Signer: blob.Signer{Secret: []byte("test"), Base: "http://127.0.0.1:1"},
		Webhook: &webhook.Sender{}, RunnerCommand: r.runner, Name: "idle",
		Log:            slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReconcileEvery: 2 * time.Second, LeaderTTL: 2 * time.Second, StreamIdle: time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 30*time.Second, "the dispatcher to lead", d.Leading)
	// Nomad's heartbeats come every 10 s, so five quiet checks a second apart are
	// idle periods in which the stream delivered nothing at all.
	testenv.Eventually(t, 60*time.Second, "five quiet checks of the stream", func() bool {
		return strings.Count(log.String(), "nomad event stream quiet") >= 5
	})
	if n := events.streams.Load(); n != 1 {
		t.Errorf("%d event streams opened for an idle cluster, want 1", n)
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "event stream broke") {
			t.Errorf("logged for an idle cluster: %s", line)
		}
	}
}
