// Package bench measures the gateway's throughput against baselines taken in the
// same run (see docs/benchmarks.md and `make bench`):
//
//   - BenchmarkCreateJob: POST /api/ffmpeg through the real gateway, real embedded
//     etcd, over loopback HTTP, 64 concurrent clients.
//   - BenchmarkCreateRawEtcd: the create transaction alone (same shape, same key
//     and value sizes, same etcd server and client), 64 concurrent callers.
//   - BenchmarkGetJob: GET /api/jobs/{id} through the real gateway, 64 clients.
//   - BenchmarkGetBareFiber: a bare fiber handler on another loopback listener
//     answering the same route with a body of the same size; same HTTP client.
//   - BenchmarkTransfer (transfer_test.go): a 200 MB file up and down through
//     mediajobs' URLs with the store on MinIO (its own presigned URLs) beside
//     MinIO's own client, and through the gateway in file mode; CPU per GB, the
//     gateway's included. It needs the minio binary (`make deps`).
//
// The environment starts on the first benchmark or test that needs it; it
// needs nothing outside this process (etcd is embedded). The tests
// (alloc_test.go) hold the gateway's allocations per request to a budget.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Clients is the number of concurrent clients of every benchmark.
const Clients = 64

// prefix is the gateway's etcd key prefix; rawPrefix has the same length, so the
// raw transactions write keys of the same size.
const (
	prefix    = "/mediajobs/"
	rawPrefix = "/rawbench0/"
	account   = "bench"
)

// createBody is a realistic create request: one input URL, one output, one command.
var createBody = []byte(`{"input_files":{"video":"https://media.example.com/uploads/2024/06/clip-000123.mp4"},` +
	`"output_files":["out.mp4"],` +
	`"ffmpeg_commands":["-i {{video}} -c:v libx264 -preset veryfast -crf 23 -vf scale=1280:-2 -c:a aac -b:a 128k {{out.mp4}}"]}`)

type env struct {
	dir     string
	emb     *store.Embedded
	st      *store.Store
	gwApp   *fiber.App
	bareApp *fiber.App
	gwURL   string
	bareURL string
	secret  string
	client  *http.Client

	jobJSON string   // a stored job's JSON, as the gateway wrote it
	jobID   string   // its id (replaced in jobJSON by the raw benchmark)
	getIDs  []string // pre-created jobs for the GET benchmarks
	getBody []byte   // the gateway's GET body for getIDs[0]
}

var (
	envOnce sync.Once
	envVal  *env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if envVal != nil {
		envVal.close()
	}
	os.Exit(code)
}

func getEnv(tb testing.TB) *env {
	tb.Helper()
	envOnce.Do(func() { envVal, envErr = startEnv() })
	if envErr != nil {
		tb.Fatal(envErr)
	}
	return envVal
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// newClient is the HTTP client of every HTTP benchmark: keep-alive connections,
// enough idle ones per host for all clients.
func newClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        4 * Clients,
			MaxIdleConnsPerHost: 4 * Clients,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
	}
}

func startEnv() (_ *env, err error) {
	e := &env{client: newClient()}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "mediajobs-bench-"); err != nil {
		return nil, err
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, err
	}
	if e.emb, err = store.StartEmbedded(e.dir+"/etcd", "127.0.0.1:0", peer); err != nil {
		return nil, err
	}
	e.st = store.New(e.emb.Client, prefix)
	ctx := context.Background()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.gwURL = "http://" + ln.Addr().String()
	cfg := config.Default()
	cfg.Server.PublicURL = e.gwURL
	cfg.Server.RateLimit = 0 // one account hammering the API is the point here
	noLimit := int64(0)      // nor its account limits (docs/limits.md)
	cfg.Limits.MaxQueuedJobs, cfg.Limits.MaxJobBytes = &noLimit, &noLimit
	cfg.Pipelines.MaxSteps = pipelineSteps // pipelines_test.go: a 100-step pipeline
	cfg.Etcd.Prefix = prefix
	if err := cfg.Finish(); err != nil {
		ln.Close()
		return nil, err
	}
	blobs, err := blob.NewLocal(e.dir + "/blobs")
	if err != nil {
		ln.Close()
		return nil, err
	}
	g := &gateway.Gateway{Config: cfg, Store: e.st, Blobs: blobs,
		Signer: blob.Signer{Secret: []byte("bench-signing-secret-0123456789"), Base: e.gwURL},
		// No DNS from benchmarks: the input host "resolves" to a public documentation address.
		Resolver: staticResolver{},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.gwApp = g.App()
	// As `mediajobs gateway` does: keeps the key and job caches current.
	go g.Watch(context.Background())
	go e.gwApp.Listener(ln)

	if _, err := e.st.EnsureAccount(ctx, account, account); err != nil {
		return nil, err
	}
	e.secret = mj.NewAPIKeySecret()
	if _, err := e.st.AddAPIKey(ctx, account, "bench", e.secret); err != nil {
		return nil, err
	}

	// One job through the API: its stored JSON sizes the raw transaction.
	id, err := e.create()
	if err != nil {
		return nil, err
	}
	resp, err := e.emb.Client.Get(ctx, prefix+"jobs/"+id)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != 1 {
		return nil, fmt.Errorf("job %s not stored under %sjobs/", id, prefix)
	}
	e.jobID, e.jobJSON = id, string(resp.Kvs[0].Value)

	// Jobs for the GET benchmarks.
	e.getIDs = make([]string, 256)
	for i := range e.getIDs {
		if e.getIDs[i], err = e.create(); err != nil {
			return nil, err
		}
	}
	if e.getBody, err = e.get(e.gwURL, e.getIDs[0]); err != nil {
		return nil, err
	}

	// The bare fiber app: same route, same body size, nothing else.
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.bareURL = "http://" + bln.Addr().String()
	e.bareApp = fiber.New(fiber.Config{DisableStartupMessage: true})
	body := e.getBody
	e.bareApp.Get("/api/jobs/:id", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(body)
	})
	go e.bareApp.Listener(bln)
	if b, err := e.get(e.bareURL, e.getIDs[0]); err != nil || len(b) != len(body) {
		return nil, fmt.Errorf("bare fiber app: %d bytes, %v", len(b), err)
	}
	return e, nil
}

func (e *env) close() {
	if e.gwApp != nil {
		e.gwApp.ShutdownWithTimeout(5 * time.Second)
	}
	if e.bareApp != nil {
		e.bareApp.ShutdownWithTimeout(5 * time.Second)
	}
	if e.emb != nil {
		e.emb.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// create POSTs createBody and returns the new job's id.
func (e *env) create() (string, error) {
	return testenv.CreateJob(context.Background(), e.client, e.gwURL, e.secret, createBody)
}

// get fetches /api/jobs/{id} from base (the gateway or the bare app).
func (e *env) get(base, id string) ([]byte, error) {
	req, err := http.NewRequest("GET", base+"/api/jobs/"+id, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.secret)
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: HTTP %d %s", req.URL.Path, resp.StatusCode, raw)
	}
	return raw, nil
}

// rawCreate is the gateway's create transaction (store.CreateJobOnce without an
// Idempotency-Key) written directly, in the store's order: the job JSON, the account
// index, the pool's queue key, the status index (4 puts: a new job has no active
// key to delete, and the store writes only keys that change), if the job key is new.
func (e *env) rawCreate(ctx context.Context) error {
	id := uuid.NewString()
	job := strings.ReplaceAll(e.jobJSON, e.jobID, id)
	now := time.Now().UnixNano()
	inv := math.MaxInt64 - now
	jobKey := rawPrefix + "jobs/" + id
	resp, err := e.emb.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(jobKey), "=", 0)).
		Then(
			clientv3.OpPut(jobKey, job),
			clientv3.OpPut(fmt.Sprintf("%sidx/%s/%019d-%s", rawPrefix, account, inv, id), id),
			clientv3.OpPut(fmt.Sprintf("%squeue/cpu/%019d_%s", rawPrefix, now, id), id),
			clientv3.OpPut(fmt.Sprintf("%ssidx/%s/queued/%019d-%s", rawPrefix, account, inv, id), id),
		).Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("raw create: job key exists")
	}
	return err
}

// run calls op b.N times from Clients goroutines and reports ops/s. The timer
// covers only the calls.
func run(b *testing.B, op func(i int) error) {
	b.Helper()
	var (
		next     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	n := int64(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for range Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n || firstErr.Load() != nil {
					return
				}
				if err := op(int(i)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if p := firstErr.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	// The whole process's CPU (clients, gateway and etcd alike) per call: on a
	// shared machine, steadier than ops/s, which other load takes from.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkCreateJob(b *testing.B) {
	e := getEnv(b)
	run(b, func(int) error { _, err := e.create(); return err })
}

func BenchmarkCreateRawEtcd(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	run(b, func(int) error { return e.rawCreate(ctx) })
}

func BenchmarkGetJob(b *testing.B) {
	e := getEnv(b)
	run(b, func(i int) error {
		body, err := e.get(e.gwURL, e.getIDs[i%len(e.getIDs)])
		return checkSize(body, err, len(e.getBody))
	})
}

func BenchmarkGetBareFiber(b *testing.B) {
	e := getEnv(b)
	run(b, func(i int) error {
		body, err := e.get(e.bareURL, e.getIDs[i%len(e.getIDs)])
		return checkSize(body, err, len(e.getBody))
	})
}

// checkSize accepts a GET body within a few bytes of want: job bodies differ only
// in their timestamps, whose fractional seconds drop trailing zeros.
func checkSize(body []byte, err error, want int) error {
	if err == nil && (len(body) < want-16 || len(body) > want+16) {
		err = fmt.Errorf("GET: %d bytes, want about %d", len(body), want)
	}
	return err
}

// staticResolver answers every lookup with one public address, without a query.
type staticResolver struct{}

func (staticResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
}
