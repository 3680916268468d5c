package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The soak (docs/benchmarks.md, "Soak"): mixed load on the whole stack for
// MEDIAJOBS_SOAK_DURATION (15 minutes by default), then every job must be
// terminal with the status its kind expects, every webhook delivered exactly
// once, nothing left running on Nomad or on a warm runner, and the gateway's and
// the dispatcher's goroutines and heap flat. `make soak` runs it (and `make
// bench` once, unless SOAK_DURATION=0); `-bench .` alone skips it.

var (
	soakOn      = flag.Bool("e2e.soak", false, "run BenchmarkSoak (make soak); its duration is MEDIAJOBS_SOAK_DURATION, 15m by default")
	soakWorkers = flag.Int("e2e.soakworkers", 2, "BenchmarkSoak: jobs each account keeps in flight")
)

const (
	soakAccount2 = "soak2" // the second account; the first is the environment's
	// The flatness bounds, generous on purpose: the last third's median against
	// the first third's, of the gateway and of the dispatcher.
	soakHeapRatio      = 1.5
	soakGoroutineSlack = 50
	// soakHeapSlack is growth no bound fails on: the components' heaps are
	// well under a megabyte, sampled one allocation per 4 KiB, so a quarter
	// megabyte either way is the sampling's, not a leak's (a leak of 100
	// bytes a job over the soak's thousands of jobs is more).
	soakHeapSlack = 512 << 10
	// soakSettle is left out of the first third: the gateway keeps an idle
	// keep-alive connection (a goroutine and its buffers) for 2 minutes
	// (gateway.go, IdleTimeout), so the connections of a steady load take that
	// long to build up. The bounds are checked from soakEnforceFrom of load on
	// (the first third then holds a minute after soakSettle); a shorter run
	// reports its figures only.
	soakSettle      = 3 * time.Minute
	soakEnforceFrom = 12 * time.Minute
)

// The commands of the mix: 0.1 s of tone (succeeds), the same into an encoder
// that does not exist (ffmpeg exits 1), and 20 s of tone at native rate (long
// enough to be cancelled while it runs).
const (
	soakGood = "-f lavfi -i sine=duration=0.1 {{o.wav}}"
	soakFail = "-f lavfi -i sine=duration=0.1 -c:a no_such_encoder {{o.wav}}"
	soakLong = "-re -f lavfi -i sine=duration=20 {{o.wav}}"
)

// soakKind is one kind of job of the mix: its command, what the client does to
// it, and the status it must end in.
type soakKind struct {
	name   string
	warm   bool   // on the warm pool (timeout within its max_job_seconds), else the per-job cpu pool
	cmd    string // ffmpeg command
	cancel string // "": none; "queued": at once after the create; "running": once it runs
	want   mj.Status
}

// soakMix is the cycle each worker goes through (from its own offset): half the
// jobs succeed, the rest fail or are cancelled, on both paths.
var soakMix = []soakKind{
	{"good-warm", true, soakGood, "", mj.StatusSucceeded},
	{"good-dispatch", false, soakGood, "", mj.StatusSucceeded},
	{"fail-warm", true, soakFail, "", mj.StatusFailed},
	{"cancel-queued-dispatch", false, soakLong, "queued", mj.StatusCancelled},
	{"good-warm", true, soakGood, "", mj.StatusSucceeded},
	{"cancel-running-warm", true, soakLong, "running", mj.StatusCancelled},
	{"good-dispatch", false, soakGood, "", mj.StatusSucceeded},
	{"fail-dispatch", false, soakFail, "", mj.StatusFailed},
	{"good-warm", true, soakGood, "", mj.StatusSucceeded},
	{"cancel-running-dispatch", false, soakLong, "running", mj.StatusCancelled},
	{"good-dispatch", false, soakGood, "", mj.StatusSucceeded},
	{"cancel-queued-warm", true, soakLong, "queued", mj.StatusCancelled},
}

// soakJob is one job the soak created.
type soakJob struct {
	id, account     string
	kind            soakKind
	startedAtCancel bool // the cancel found it running (StartedAt set)
}

// soakReceiver is the webhook receiver: every delivery by job id (from the body),
// with its delivery id and event.
type soakReceiver struct {
	srv *http.Server
	url string
	mu  sync.Mutex
	got map[string][]soakHook // job id -> deliveries
	bad int                   // bodies without a job id
}

type soakHook struct{ delivery, event string }

func startSoakReceiver() (*soakReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &soakReceiver{url: "http://" + ln.Addr().String() + "/hook", got: map[string][]soakHook{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *soakReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body struct {
		ID string `json:"id"`
	}
	raw, err := io.ReadAll(req.Body)
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	r.mu.Lock()
	if err != nil || body.ID == "" {
		r.bad++
	} else {
		r.got[body.ID] = append(r.got[body.ID], soakHook{req.Header.Get("X-Mediajobs-Delivery"), req.Header.Get("X-Mediajobs-Event")})
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *soakReceiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[id])
}

// soakSample is the process at one moment: goroutines and heap by component
// (component's names, and "" for the rest), and the whole process's.
type soakSample struct {
	at    time.Duration      // since the load began
	g     map[string]int     // goroutines
	heap  map[string]float64 // in-use bytes by the allocating stack
	procG int
	live  float64 // the process's live heap
}

// The components the soak tells apart. The gateway's job cache (gateway/jobcache.go)
// is kept apart from the rest of the gateway's heap: it holds every job the
// gateway created or read, up to 50,000 jobs or 256 MiB, so it grows with the
// jobs by design; it is reported, not bounded.
const (
	compGateway  = "gateway"
	compJobCache = "gateway job cache"
	compDisp     = "dispatcher"
	compEtcd     = "embedded etcd"
)

// component names what a goroutine's or an allocation's stack belongs to, from
// its function names: the gateway (its package, fiber, fasthttp), the
// dispatcher (its package), the embedded etcd server; "" for the rest (gRPC
// and the etcd client's own goroutines, this benchmark's clients and receiver,
// the runtime). An allocation under the gateway's job watch, or of the cache
// itself (a created job it keeps), is the job cache's.
func component(funcs []string) string {
	comp := ""
	for _, f := range funcs {
		switch {
		case strings.HasPrefix(f, "github.com/mediajobs/mediajobs/gateway.(*Gateway).watchJobs"),
			strings.HasPrefix(f, "github.com/mediajobs/mediajobs/gateway.(*jobCache)."):
			return compJobCache
		case strings.HasPrefix(f, "github.com/mediajobs/mediajobs/gateway."),
			strings.HasPrefix(f, "github.com/gofiber/"), strings.HasPrefix(f, "github.com/valyala/fasthttp"):
			comp = compGateway
		case strings.HasPrefix(f, "github.com/mediajobs/mediajobs/dispatcher."):
			if comp != compGateway {
				comp = compDisp
			}
		case strings.HasPrefix(f, "go.etcd.io/etcd/server/"), strings.HasPrefix(f, "go.etcd.io/raft/"), strings.HasPrefix(f, "go.etcd.io/bbolt"):
			if comp == "" {
				comp = compEtcd
			}
		}
	}
	return comp
}

// signature names a stack in the log: its first frames outside the runtime and
// the standard library's plumbing, and its outermost frame.
func signature(funcs []string) string {
	var keep []string
	for _, f := range funcs {
		if len(keep) < 3 && !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "sync.") && !strings.HasPrefix(f, "internal/") &&
			!strings.HasPrefix(f, "encoding/") && !strings.HasPrefix(f, "reflect.") {
			keep = append(keep, f)
		}
	}
	if len(funcs) > 0 {
		keep = append(keep, "… "+funcs[len(funcs)-1])
	}
	return strings.Join(keep, " < ")
}

// top is the n largest entries of m, one a line.
func top[V int | float64](m map[string]V, n int, format func(V) string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	var b strings.Builder
	for i, k := range keys {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "\n  %s  %s", format(m[k]), k)
	}
	return b.String()
}

// goroutines counts the goroutines by component, and all of them, from a dump
// of every stack (its functions and the one that created it); by, when not
// nil, gets the mediajobs components' counted by signature too.
func goroutines(by map[string]int) (map[string]int, int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	counts, all := map[string]int{}, 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		funcs := stackFuncs(string(g))
		if len(funcs) == 0 {
			continue
		}
		all++
		c := component(funcs)
		counts[c]++
		if by != nil && c != "" && c != compEtcd {
			by[c+": "+signature(funcs)]++
		}
	}
	return counts, all
}

// stackFuncs is the functions of one goroutine of a runtime.Stack dump,
// innermost first, the one that created it last.
func stackFuncs(g string) []string {
	var funcs []string
	for _, l := range strings.Split(g, "\n") {
		if l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "goroutine ") {
			continue
		}
		if c, ok := strings.CutPrefix(l, "created by "); ok {
			l, _, _ = strings.Cut(c, " in goroutine ")
		} else if i := strings.LastIndexByte(l, '('); i > 0 {
			l = l[:i] // the arguments: "pkg.(*T).f(0xc000…, …)"
		}
		funcs = append(funcs, l)
	}
	return funcs
}

// heapShares is the in-use heap at the last GC by component of the allocating
// stack, from the heap profile (full stacks, unlike runtime.MemProfile's 32
// frames), scaled up from its samples as pprof does; by, when not nil, gets the
// mediajobs components' bytes by allocation site too.
func heapShares(by map[string]float64) (map[string]float64, error) {
	var b bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&b, 1); err != nil {
		return nil, err
	}
	rate := float64(runtime.MemProfileRate)
	shares := map[string]float64{}
	var objs, size float64
	var funcs []string
	flush := func() {
		if objs > 0 && size > 0 {
			v := size
			if rate > 1 {
				v /= 1 - math.Exp(-size/objs/rate)
			}
			c := component(funcs)
			shares[c] += v
			if by != nil && c != "" && c != compEtcd {
				by[c+": "+signature(funcs)] += v
			}
		}
		objs, size, funcs = 0, 0, funcs[:0]
	}
	sc := bufio.NewScanner(&b)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "#\t0x"): // "#\t0x4b1c2d\tpkg.fn+0x2d\tfile:line"
			if f := strings.Split(l, "\t"); len(f) > 2 {
				fn, _, _ := strings.Cut(f[2], "+0x")
				funcs = append(funcs, fn)
			}
		case strings.Contains(l, "] @ ") && !strings.HasPrefix(l, "heap profile"): // "inuse objs: inuse bytes [alloc…] @ pcs"
			flush()
			o, rest, _ := strings.Cut(l, ": ")
			s, _, _ := strings.Cut(rest, " ")
			objs, _ = strconv.ParseFloat(o, 64)
			size, _ = strconv.ParseFloat(s, 64)
		}
	}
	flush()
	return shares, sc.Err()
}

// liveHeap is the process's heap marked live by the last GC.
func liveHeap() float64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(s[0].Value.Uint64())
}

// sampleProcess samples every `every` until ctx ends.
func sampleProcess(ctx context.Context, start time.Time, every time.Duration, out *[]soakSample, mu *sync.Mutex) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := soakSample{at: time.Since(start), live: liveHeap()}
		s.g, s.procG = goroutines(nil)
		var err error
		if s.heap, err = heapShares(nil); err != nil {
			continue
		}
		mu.Lock()
		*out = append(*out, s)
		mu.Unlock()
	}
}

// thirds returns the medians of f over the first and the last third of the run;
// settled: the first third less its first soakSettle.
func thirds(ss []soakSample, d time.Duration, settled bool, f func(soakSample) float64) (first, last float64) {
	from := time.Duration(0)
	if settled {
		from = soakSettle
	}
	var a, z []float64
	for _, s := range ss {
		switch {
		case s.at >= from && s.at < d/3:
			a = append(a, f(s))
		case s.at >= 2*d/3:
			z = append(z, f(s))
		}
	}
	return medianF(a), medianF(z)
}

func medianF(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func soakDuration() (time.Duration, error) {
	v := os.Getenv("MEDIAJOBS_SOAK_DURATION")
	if v == "" {
		return 15 * time.Minute, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 30*time.Second {
		return 0, fmt.Errorf("MEDIAJOBS_SOAK_DURATION=%q: use a duration of at least 30s, such as 15m", v)
	}
	return d, nil
}

// runSoakJob creates one job of kind k, cancels it as the kind says, and follows
// it through the gateway's event stream until it ends.
func runSoakJob(ctx context.Context, c *client.Client, account string, k soakKind, hook string) (soakJob, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req := client.CreateRequest{OutputFiles: []string{"o.wav"}, FFmpegCommands: []string{k.cmd}, WebhookURL: hook}
	if k.warm {
		req.Machine, req.TimeoutSeconds = warmPool, 30
	}
	j, err := c.Create(ctx, req)
	if err != nil {
		return soakJob{}, fmt.Errorf("%s: create: %w", k.name, err)
	}
	sj := soakJob{id: j.ID, account: account, kind: k}
	doCancel := func() error {
		cj, err := c.Cancel(ctx, j.ID)
		if err != nil {
			return fmt.Errorf("%s: cancel %s: %w", k.name, j.ID, err)
		}
		sj.startedAtCancel = cj.StartedAt != nil
		return nil
	}
	if k.cancel == "queued" {
		if err := doCancel(); err != nil {
			return sj, err
		}
	}
	var cerr error
	cancelled := false
	end, err := c.Wait(ctx, j.ID, func(j *client.Job) {
		if k.cancel == "running" && !cancelled && j.Status == mj.StatusRunning {
			cancelled, cerr = true, doCancel()
		}
	})
	switch {
	case err != nil:
		return sj, fmt.Errorf("%s: wait for %s: %w", k.name, j.ID, err)
	case cerr != nil:
		return sj, cerr
	case end.Status != k.want:
		return sj, fmt.Errorf("%s: job %s ended %s, want %s: %s %s", k.name, j.ID, end.Status, k.want, end.ErrorMessage, end.StatusDetail)
	case k.cancel == "running" && !cancelled:
		return sj, fmt.Errorf("%s: job %s was never seen running", k.name, j.ID)
	}
	return sj, nil
}

// BenchmarkSoak is the soak: two accounts, each keeping -e2e.soakworkers jobs of
// soakMix in flight for MEDIAJOBS_SOAK_DURATION, every job with a webhook to a
// loopback receiver, the warm pool's runners up. The process (gateway,
// dispatcher, embedded etcd) is sampled throughout. Then it checks, from etcd,
// Nomad and the receiver, what the file's comment says, and reports the counts
// and the first and last thirds' medians of goroutines and heap.
func BenchmarkSoak(b *testing.B) {
	if !*soakOn {
		b.Skip("the soak runs with -e2e.soak (make soak)")
	}
	d, err := soakDuration()
	if err != nil {
		b.Fatal(err)
	}
	// Finer heap samples for heapShares (default: one per 512 KiB), set before
	// the stack starts when the soak runs alone, as `make soak` runs it.
	runtime.MemProfileRate = 4 << 10
	e := getEnv(b)
	ctx := context.Background()
	recv, err := startSoakReceiver()
	if err != nil {
		b.Fatal(err)
	}
	defer recv.srv.Close()
	if _, err := e.st.EnsureAccount(ctx, soakAccount2, soakAccount2); err != nil {
		b.Fatal(err)
	}
	key2 := mj.NewAPIKeySecret()
	if _, err := e.st.AddAPIKey(ctx, soakAccount2, "soak", key2); err != nil {
		b.Fatal(err)
	}
	clients := map[string]*client.Client{}
	for acct, key := range map[string]string{account: e.key, soakAccount2: key2} {
		if clients[acct], err = client.New(e.gwURL, key, client.WithHTTPClient(newClient(16))); err != nil {
			b.Fatal(err)
		}
	}
	warmUp(b, e) // the warm runners up (down again at the end)

	var (
		mu      sync.Mutex
		jobs    []soakJob
		errs    []error
		samples []soakSample
		smu     sync.Mutex
	)
	// What the gateway and the dispatcher hold before and after the load, by
	// stack: the growth is logged, to say where a leak is.
	snapshot := func() (map[string]int, map[string]float64) {
		g, h := map[string]int{}, map[string]float64{}
		runtime.GC() // the heap profile as of now
		runtime.GC()
		goroutines(g)
		heapShares(h)
		return g, h
	}
	g0, h0 := snapshot()
	b.ResetTimer()
	start := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sampleProcess(sctx, start, min(max(d/90, time.Second), 10*time.Second), &samples, &smu)
	}()
	var wg sync.WaitGroup
	w := 0
	for acct, c := range clients {
		for range *soakWorkers {
			wg.Add(1)
			go func(offset int) {
				defer wg.Done()
				for i := offset; time.Since(start) < d; i++ {
					sj, err := runSoakJob(ctx, c, acct, soakMix[i%len(soakMix)], recv.url)
					mu.Lock()
					if sj.id != "" {
						jobs = append(jobs, sj)
					}
					if err != nil {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}(w * 5)
			w++
		}
	}
	wg.Wait()
	loadEnd := time.Since(start)
	stopSampling()
	<-sampled
	b.StopTimer()
	g1, h1 := snapshot()
	for k, v := range g0 {
		g1[k] -= v
	}
	for k, v := range h0 {
		h1[k] -= v
	}
	b.Logf("goroutines that grew over the load, by stack:%s", top(g1, 8, func(v int) string { return fmt.Sprintf("%+5d", v) }))
	b.Logf("heap that grew over the load, by allocation site:%s", top(h1, 8, func(v float64) string { return fmt.Sprintf("%+8.0f KiB", v/1024) }))

	for i, err := range errs {
		if i == 10 {
			b.Errorf("… and %d more errors", len(errs)-10)
			break
		}
		b.Error(err)
	}

	// Every job terminal with its kind's status, in etcd; its webhook delivered
	// once, under its delivery id, and received exactly once.
	counts := map[string]int{}
	var warmRan, dispatched, queuedCancels, runningCancels, badStatus, badHooks int
	deadline := time.Now().Add(2 * time.Minute)
	for _, sj := range jobs {
		j, err := e.st.Job(ctx, sj.id)
		for err == nil && (j.Webhook == nil || j.Webhook.Status == "pending" || recv.count(sj.id) == 0) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			j, err = e.st.Job(ctx, sj.id)
		}
		switch {
		case err != nil:
			badStatus++
			b.Errorf("job %s (%s): %v", sj.id, sj.kind.name, err)
			continue
		case j.Status != sj.kind.want:
			badStatus++
			b.Errorf("job %s (%s) is %s in etcd, want %s", sj.id, sj.kind.name, j.Status, sj.kind.want)
		}
		counts[string(j.Status)]++
		if j.Worker != nil && j.Worker.Path == mj.WorkerWarm {
			warmRan++
		} else if j.Worker != nil && j.Worker.Path == mj.WorkerDispatch {
			dispatched++
		}
		if sj.kind.cancel != "" {
			if sj.startedAtCancel {
				runningCancels++
			} else {
				queuedCancels++
			}
		}
		recv.mu.Lock()
		got := recv.got[sj.id]
		recv.mu.Unlock()
		if len(got) != 1 || j.Webhook == nil || j.Webhook.Status != "delivered" || j.Webhook.Attempts != 1 ||
			got[0].delivery != j.Webhook.DeliveryID || got[0].event != "job."+string(j.Status) {
			badHooks++
			b.Errorf("job %s (%s, %s): webhooks received %+v, want one, event job.%s, delivered at the first attempt: %+v",
				sj.id, sj.kind.name, j.Status, got, j.Status, j.Webhook)
		}
	}
	ours := map[string]bool{}
	for _, sj := range jobs {
		ours[sj.id] = true
	}
	recv.mu.Lock()
	received, unknown := 0, 0
	for id, hs := range recv.got {
		received += len(hs)
		if !ours[id] {
			unknown++
		}
	}
	bad := recv.bad
	recv.mu.Unlock()
	if unknown != 0 || bad != 0 {
		badHooks += unknown + bad
		b.Errorf("the receiver got webhooks for %d jobs the soak did not create and %d without a job id", unknown, bad)
	}
	if n, err := e.st.Client().Get(ctx, e.st.OutboxPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 0 {
		badHooks++
		b.Errorf("webhook outbox not empty at the end: %v (%v)", n, err)
	}
	if queuedCancels == 0 || runningCancels == 0 || warmRan == 0 || dispatched == 0 {
		b.Errorf("the mix did not cover every path: %d cancelled before they started, %d while running, %d ran warm, %d dispatched",
			queuedCancels, runningCancels, warmRan, dispatched)
	}
	// Nothing left running: every dispatched child dead, every warm runner idle.
	leftRunning := 0
	if err := soakQuiet(ctx, e); err != nil {
		leftRunning = 1
		b.Error(err)
	}

	// Flat: the last third's medians against the first third's.
	smu.Lock()
	ss := samples
	smu.Unlock()
	enforce := loadEnd >= soakEnforceFrom
	f := func(g func(soakSample) float64) (float64, float64) { return thirds(ss, loadEnd, enforce, g) }
	type figure struct {
		comp, unit  string
		first, last float64
	}
	var figs []figure
	for _, c := range []string{compGateway, compDisp, compJobCache, compEtcd, "process"} {
		if c != compJobCache {
			g0, g1 := f(func(s soakSample) float64 {
				if c == "process" {
					return float64(s.procG)
				}
				return float64(s.g[c])
			})
			figs = append(figs, figure{c, "goroutines", g0, g1})
		}
		h0, h1 := f(func(s soakSample) float64 {
			if c == "process" {
				return s.live
			}
			return s.heap[c]
		})
		figs = append(figs, figure{c, "heap", h0, h1})
	}
	var summary strings.Builder
	for _, fg := range figs {
		first, last := fg.first, fg.last
		if fg.unit == "heap" {
			first, last = first/(1<<20), last/(1<<20)
			fmt.Fprintf(&summary, "; %s heap %.2f → %.2f MB", fg.comp, first, last)
		} else {
			fmt.Fprintf(&summary, "; %s goroutines %.0f → %.0f", fg.comp, first, last)
		}
		if fg.comp != compGateway && fg.comp != compDisp {
			continue // reported only: see the constants
		}
		ok := fg.last <= fg.first+soakGoroutineSlack
		if fg.unit == "heap" {
			ok = fg.last <= soakHeapRatio*fg.first || fg.last-fg.first <= soakHeapSlack
		}
		if enforce && (fg.first == 0 || !ok) {
			b.Errorf("%s %s not flat: median %.0f in the first third (from minute %.0f), %.0f in the last (bounds: +%d goroutines, %.1f × heap or +%d KiB)",
				fg.comp, fg.unit, fg.first, soakSettle.Minutes(), fg.last, soakGoroutineSlack, soakHeapRatio, soakHeapSlack>>10)
		}
	}
	if !enforce {
		b.Logf("the flatness bounds are checked from %s of load on; this run's figures are reported only", soakEnforceFrom)
	}
	b.Logf("%d jobs in %s: %v; %d cancelled before they started, %d running; %d ran warm, %d dispatched; %d webhooks received; "+
		"%d client errors, %d with another status, %d webhook faults; %d samples, first → last third's median%s",
		len(jobs), loadEnd.Round(time.Second), counts, queuedCancels, runningCancels, warmRan, dispatched, received,
		len(errs), badStatus, badHooks, len(ss), summary.String())
	b.ReportMetric(loadEnd.Minutes(), "min")
	b.ReportMetric(float64(len(jobs)), "jobs")
	b.ReportMetric(float64(len(jobs))/loadEnd.Seconds(), "jobs/s")
	b.ReportMetric(float64(counts[string(mj.StatusSucceeded)]), "succeeded")
	b.ReportMetric(float64(counts[string(mj.StatusFailed)]), "failed")
	b.ReportMetric(float64(counts[string(mj.StatusCancelled)]), "cancelled")
	b.ReportMetric(float64(queuedCancels), "cancelled-queued")
	b.ReportMetric(float64(runningCancels), "cancelled-running")
	b.ReportMetric(float64(warmRan), "warm")
	b.ReportMetric(float64(dispatched), "dispatched")
	b.ReportMetric(float64(received), "webhooks")
	b.ReportMetric(float64(len(errs)), "errors")
	b.ReportMetric(float64(badStatus), "wrong-status")
	b.ReportMetric(float64(badHooks), "webhook-faults")
	b.ReportMetric(float64(leftRunning), "left-running")
	b.ReportMetric(float64(len(ss)), "samples")
	b.ReportMetric(map[bool]float64{true: 1}[enforce], "flat-checked")
	short := map[string]string{compGateway: "gw", compDisp: "disp", compJobCache: "cache", compEtcd: "etcd", "process": "proc"}
	for _, fg := range figs {
		if fg.unit == "heap" {
			b.ReportMetric(fg.first/(1<<20), short[fg.comp]+"-heap-MB-first")
			b.ReportMetric(fg.last/(1<<20), short[fg.comp]+"-heap-MB-last")
		} else {
			b.ReportMetric(fg.first, short[fg.comp]+"-goroutines-first")
			b.ReportMetric(fg.last, short[fg.comp]+"-goroutines-last")
		}
	}
}

// soakQuiet waits (2 minutes at most) until no child of either pool is still
// pending or running on Nomad and every warm runner waits for work again: a
// cancelled job's work was stopped, and no runner was lost.
func soakQuiet(ctx context.Context, e *env) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var live []string
		for _, pool := range []string{"cpu", warmPool} {
			stubs, _, err := e.rawJobs.PrefixList(mj.PoolJobID(pool) + "/")
			if err != nil {
				return err
			}
			for _, s := range stubs {
				if s.Status != "dead" {
					live = append(live, s.ID+" ("+s.Status+")")
				}
			}
		}
		idle, err := e.st.WarmIdleRunners(ctx, warmPool)
		if err == nil && len(live) == 0 && len(idle) == *warmRunners {
			return nil
		}
		if time.Now().After(deadline) {
			// The runners' logs say what a busy one is doing.
			var logs strings.Builder
			stubs, _, _ := e.rawJobs.Allocations(mj.WarmJobID(warmPool), false, nil)
			for _, a := range stubs {
				if a.ClientStatus == "running" {
					logs.WriteString(tail(e.nomad.TaskLogs(a.ID, "runner"), 3000))
				}
			}
			return fmt.Errorf("2 minutes after the load: %d children not dead (%.300s), %d of %d warm runners waiting for work (%v) %+v\n%s",
				len(live), strings.Join(live, ", "), len(idle), *warmRunners, err, idle, logs.String())
		}
		time.Sleep(time.Second)
	}
}

// TestSoakSampling checks the soak's attribution of stacks, and that the heap
// profile and the goroutine dump parse (milliseconds; nothing starts).
func TestSoakSampling(t *testing.T) {
	for _, c := range []struct {
		funcs []string
		want  string
	}{
		{[]string{"github.com/valyala/fasthttp.(*workerPool).workerFunc", "github.com/valyala/fasthttp.(*workerPool).getCh.func1"}, compGateway},
		{[]string{"github.com/mediajobs/mediajobs/store.(*Store).Job", "github.com/mediajobs/mediajobs/gateway.(*Gateway).getJob"}, compGateway},
		{[]string{"encoding/json.Unmarshal", "github.com/mediajobs/mediajobs/store.(*Store).WatchJobs", "github.com/mediajobs/mediajobs/gateway.(*Gateway).watchJobs.func1"}, compJobCache},
		{[]string{"github.com/mediajobs/mediajobs/gateway.(*jobCache).put", "github.com/mediajobs/mediajobs/gateway.(*Gateway).createJob", "github.com/gofiber/fiber/v2.(*App).next"}, compJobCache},
		{[]string{"github.com/mediajobs/mediajobs/store.(*Store).UpdateJob", "github.com/mediajobs/mediajobs/dispatcher.(*Dispatcher).eventLoop"}, compDisp},
		{[]string{"go.etcd.io/raft/v3.(*MemoryStorage).Append", "go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).run"}, compEtcd},
		{[]string{"net/http.(*persistConn).readLoop", "net/http.(*Transport).dialConn"}, ""},
	} {
		if got := component(c.funcs); got != c.want {
			t.Errorf("component(%v) = %q, want %q", c.funcs, got, c.want)
		}
	}
	dump := "goroutine 7 [IO wait]:\ninternal/poll.(*FD).Read(0xc0001, {0xc0002, 0x1000, 0x1000})\n\t/go/src/internal/poll/fd_unix.go:165 +0x27a\n" +
		"github.com/valyala/fasthttp.(*Server).serveConn(0xc0003, {0x1c1, 0xc0004})\n\t/x/server.go:2200 +0x1\n" +
		"created by github.com/valyala/fasthttp.(*workerPool).getCh in goroutine 210\n\t/x/workerpool.go:195 +0x1"
	want := []string{"internal/poll.(*FD).Read", "github.com/valyala/fasthttp.(*Server).serveConn", "github.com/valyala/fasthttp.(*workerPool).getCh"}
	if got := stackFuncs(dump); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("stackFuncs = %q, want %q", got, want)
	}
	counts, all := goroutines(nil)
	if all < 1 || counts[compGateway] != 0 || counts[compDisp] != 0 {
		t.Errorf("goroutines() = %v, %d: want none of the gateway's or dispatcher's here", counts, all)
	}
	if shares, err := heapShares(nil); err != nil || shares[""] <= 0 {
		t.Errorf("heapShares() = %v, %v", shares, err)
	}
}
