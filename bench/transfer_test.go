package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/testenv"
)

// TransferSize is the size of the file BenchmarkTransfer moves: 200 MB.
const TransferSize = 200_000_000

// tmpFileCalls is how many POST /api/tmp-file calls measure the S3-mode gateway's
// CPU per transfer (each round).
const tmpFileCalls = 200

// BenchmarkTransfer moves one 200 MB file of random bytes, in each round, three
// ways, each a PUT then a GET (read to the end and dropped), over loopback:
//
//   - mjs3: mediajobs with storage.url = MinIO: POST /api/tmp-file, then the file
//     to its upload_url and back from its download_url, MinIO's presigned URLs,
//     with a plain net/http client;
//   - sdk: the baseline, straight to MinIO with the AWS SDK v2 S3 client
//     (PutObject, GetObject), in the same process. Over plain HTTP the SDK signs
//     the payload: it hashes the file (SHA-256) before sending it, and MinIO
//     hashes it again to check;
//   - sdku: the same with an unsigned payload (UNSIGNED-PAYLOAD, as presigned
//     URLs have), so that neither side hashes the file;
//   - mjfile: mediajobs in file mode (the default): the same calls, but the URLs
//     are the gateway's signed /files/ links, streamed by the gateway to and from
//     its directory.
//
// It reports MB/s (10^6 bytes) for each upload and download; this process's CPU
// per GB moved (upload and download counted: 0.4 GB a round) for each way, and
// MinIO's for the three through it; the gateway's CPU per GB in S3 mode (the CPU of
// tmpFileCalls POST /api/tmp-file calls, client side included, per call, over
// the 0.4 GB one call lets a client move) and in file mode (this process's CPU
// in file mode less in S3 mode: the same client moving the same bytes); and the
// bytes that passed through each gateway's connections per round.
func BenchmarkTransfer(b *testing.B) {
	e := getEnv(b) // etcd, the account and its key
	m := testenv.StartMinIO(b)
	m.SetEnv(b) // s3blob reads the credentials from the environment
	ctx := context.Background()

	s3gw := startGateway(b, e, m.URL())
	fileDir := filepath.Join(b.TempDir(), "blobs")
	filegw := startGateway(b, e, "file://"+fileDir)
	minioPID := childPID("minio")

	data := make([]byte, TransferSize)
	rand.Read(data)
	sdk := m.Client()
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true, IdleConnTimeout: time.Minute}}
	buf := make([]byte, 256<<10)

	type way struct {
		name     string
		up, down time.Duration
		cpu      time.Duration // this process
		minio    time.Duration // MinIO's process
		gwBytes  int64         // through the gateway's connections
		gw       *transferGateway
		transfer func(i int) (up, down time.Duration, err error)
	}
	viaGateway := func(g *transferGateway) func(int) (time.Duration, time.Duration, error) {
		return func(int) (time.Duration, time.Duration, error) {
			t0 := time.Now() // the upload's time includes asking for the URLs
			up, down, err := e.tmpFile(client, g.url)
			if err != nil {
				return 0, 0, err
			}
			if err := put(client, up, data); err != nil {
				return 0, 0, fmt.Errorf("%s: %w", g.url, err)
			}
			t1 := time.Now()
			if err := get(client, down, buf); err != nil {
				return 0, 0, fmt.Errorf("%s: %w", g.url, err)
			}
			return t1.Sub(t0), time.Since(t1), nil
		}
	}
	mjs3 := &way{name: "mjs3", gw: s3gw, transfer: viaGateway(s3gw)}
	mjfile := &way{name: "mjfile", gw: filegw, transfer: viaGateway(filegw)}
	ways := []*way{
		mjs3,
		{name: "sdk", transfer: viaSDK(sdk, m.Bucket, data, buf)},
		{name: "sdku", transfer: viaSDK(sdk, m.Bucket, data, buf, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))},
		mjfile,
	}

	var gwS3CPU time.Duration // the tmp-file calls, over all rounds
	rounds := 0
	first := mrand.IntN(len(ways)) // `make bench` runs one round per process
	for b.Loop() {
		// A different way goes first in each round.
		for k := range ways {
			w := ways[(first+rounds+k)%len(ways)]
			var gw0 int64
			if w.gw != nil {
				gw0 = w.gw.bytes.Load()
			}
			// The file written by the way before is on disk before this one starts
			// (else its writeback competes with this transfer's writes).
			syscall.Sync()
			cpu0, minio0 := selfCPU(), procCPU(minioPID)
			up, down, err := w.transfer(rounds)
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			cpu1, minio1 := selfCPU(), procCPU(minioPID)
			w.up += up
			w.down += down
			w.cpu += cpu1 - cpu0
			w.minio += minio1 - minio0
			if w.gw != nil {
				w.gwBytes += w.gw.settled() - gw0
			}
		}
		cpu0 := selfCPU()
		for range tmpFileCalls {
			if _, _, err := e.tmpFile(client, s3gw.url); err != nil {
				b.Fatal(err)
			}
		}
		gwS3CPU += selfCPU() - cpu0
		// Nothing kept between rounds: MinIO's and the file gateway's disks stay small.
		for _, dir := range []*blob.Bucket{s3gw.blobs, filegw.blobs} {
			if _, err := dir.Sweep(ctx, "tmp/", time.Now().Add(time.Hour)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s3gw.blobs.Sweep(ctx, "baseline/", time.Now().Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
		rounds++
	}

	gb := float64(rounds) * 2 * TransferSize / 1e9 // moved per way: up and down
	mbps := func(d time.Duration) float64 { return float64(rounds) * TransferSize / 1e6 / d.Seconds() }
	perGB := func(d time.Duration) float64 { return float64(d) / 1e6 / gb }
	for _, w := range ways {
		b.ReportMetric(mbps(w.up), w.name+"-up-MB/s")
		b.ReportMetric(mbps(w.down), w.name+"-down-MB/s")
		b.ReportMetric(perGB(w.cpu), w.name+"-cpu-ms/GB")
		if w != mjfile && minioPID > 0 {
			b.ReportMetric(perGB(w.minio), w.name+"-minio-cpu-ms/GB")
		}
		if w.gw != nil {
			b.ReportMetric(float64(w.gwBytes)/float64(rounds), w.name+"-gw-B")
		}
	}
	// One tmp-file call is what the gateway does for a 0.4 GB round trip in S3 mode.
	b.ReportMetric(float64(gwS3CPU)/1e6/float64(rounds*tmpFileCalls)/(2*TransferSize/1e9), "gw-s3-cpu-ms/GB")
	b.ReportMetric(perGB(mjfile.cpu-mjs3.cpu), "gw-file-cpu-ms/GB")
}

// transferGateway is an in-process gateway on the bench's etcd and account, with
// its own store, counting the bytes its connections read and write.
type transferGateway struct {
	url   string
	blobs *blob.Bucket
	bytes atomic.Int64
}

// settled is the count of bytes once it has stood still for 20 ms (at most 2 s):
// a server's last write is counted when it returns, which can be after the client
// has read it.
func (g *transferGateway) settled() int64 {
	n := g.bytes.Load()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := g.bytes.Load()
		if m == n {
			break
		}
		n = m
	}
	return n
}

// startGateway starts a gateway with storage.url = storageURL (stopped when b ends).
func startGateway(b *testing.B, e *env, storageURL string) *transferGateway {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := &transferGateway{url: "http://" + ln.Addr().String()}
	cfg := config.Default()
	cfg.Server.PublicURL = g.url
	cfg.Server.RateLimit = 0
	cfg.Etcd.Prefix = prefix
	cfg.Storage.URL = storageURL
	if err := cfg.Finish(); err != nil {
		b.Fatal(err)
	}
	if g.blobs, err = blob.Open(context.Background(), cfg.Storage.URL); err != nil {
		b.Fatal(err)
	}
	gw := &gateway.Gateway{Config: cfg, Store: e.st, Blobs: g.blobs,
		Signer:   blob.Signer{Secret: []byte("bench-signing-secret-0123456789"), Base: g.url},
		Resolver: staticResolver{},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil))}
	app := gw.App()
	ctx, cancel := context.WithCancel(context.Background())
	go gw.Watch(ctx)
	go app.Listener(countingListener{ln, &g.bytes})
	b.Cleanup(func() {
		cancel()
		app.ShutdownWithTimeout(5 * time.Second)
		g.blobs.Close()
	})
	return g
}

// viaSDK is the baseline: PutObject and GetObject of data with the AWS SDK's S3
// client, each round under a new key.
func viaSDK(sdk *s3.Client, bucket string, data, buf []byte, opts ...func(*s3.Options)) func(int) (time.Duration, time.Duration, error) {
	return func(i int) (time.Duration, time.Duration, error) {
		ctx := context.Background()
		key := fmt.Sprintf("baseline/%d-%d", i, len(opts))
		t0 := time.Now()
		if _, err := sdk.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key,
			Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))}, opts...); err != nil {
			return 0, 0, fmt.Errorf("PutObject: %w", err)
		}
		t1 := time.Now()
		out, err := sdk.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key}, opts...)
		if err != nil {
			return 0, 0, fmt.Errorf("GetObject: %w", err)
		}
		n, err := drain(out.Body, buf)
		out.Body.Close()
		if err == nil && n != int64(len(data)) {
			err = fmt.Errorf("GetObject: %d bytes", n)
		}
		return t1.Sub(t0), time.Since(t1), err
	}
}

// tmpFile is POST /api/tmp-file on base: the upload and download URLs.
func (e *env) tmpFile(client *http.Client, base string) (up, down string, err error) {
	req, err := http.NewRequest("POST", base+"/api/tmp-file", nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+e.secret)
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Upload   string `json:"upload_url"`
			Download string `json:"download_url"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.Data.Upload == "" {
		return "", "", fmt.Errorf("POST /api/tmp-file: HTTP %d, %v", resp.StatusCode, err)
	}
	return r.Data.Upload, r.Data.Download, nil
}

// put uploads data to a signed URL.
func put(client *http.Client, url string, data []byte) error {
	req, err := http.NewRequest("PUT", url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("PUT: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return fmt.Errorf("PUT: HTTP %d %s", resp.StatusCode, msg)
	}
	io.Copy(io.Discard, resp.Body)
	return nil
}

// get downloads a signed URL, dropping the bytes, and checks the size.
func get(client *http.Client, url string, buf []byte) error {
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("GET: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return fmt.Errorf("GET: HTTP %d %s", resp.StatusCode, msg)
	}
	n, err := drain(resp.Body, buf)
	if err == nil && n != TransferSize {
		err = fmt.Errorf("GET: %d bytes, want %d", n, TransferSize)
	}
	return err
}

// drain reads r to the end through buf (the same reads for every client; io.Copy
// to io.Discard would read 8 KB at a time).
func drain(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// countingListener adds what its connections read and write to n.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// ReadFrom copies as the TCP connection's own would (a response streamed from a
// reader goes out in 32 KB writes, not through the server's 4 KB buffer), counting
// each write.
func (c *countingConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{c}, r)
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childPID is the pid of a process below this one whose name starts with comm
// (the kernel keeps 15 bytes of it: "minio-RELEASE.2"), or 0.
func childPID(comm string) int {
	for _, p := range testenv.Descendants(os.Getpid()) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), comm) {
			return p
		}
	}
	return 0
}

// procCPU is pid's CPU time (user + system) from /proc/<pid>/stat; 0 when pid is
// 0 or cannot be read.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: utime and stime are the 14th and 15th fields.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
