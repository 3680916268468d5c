package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// MinIORelease is the MinIO release deploy/scripts/install-minio.sh builds; keep
// the two in step.
const MinIORelease = "RELEASE.2025-09-07T16-13-09Z"

// MinIOBinary finds the minio server binary: $MINIO_BIN, the cache `make deps`
// builds into (install-minio.sh), PATH. Missing, it fails in CI and skips
// otherwise; under -short it skips without looking (decide).
func MinIOBinary(t testing.TB) string {
	t.Helper()
	decide(t, "needs MinIO", true, true)
	if p := os.Getenv("MINIO_BIN"); p != "" {
		return p
	}
	if p := minioCached(); p != "" {
		return p
	}
	return Binary(t, "minio")
}

// minioCached is where install-minio.sh leaves the binary, or "".
func minioCached() string {
	p := filepath.Join(CacheDir(), "minio-"+MinIORelease)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// MinIO is a running `minio server` on loopback with one bucket, for the tests of
// the S3 storage.
//
// Code under test that opens URL() with gocloud.dev/blob (s3blob) loads its
// credentials the AWS SDK's default way, from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY: a test calls SetEnv, or hands AccessKey and SecretKey
// to the code it tests.
type MinIO struct {
	Endpoint  string // http://127.0.0.1:PORT, the S3 API
	AccessKey string // the root user
	SecretKey string // the root password
	Bucket    string // created by StartMinIO
	Region    string // "us-east-1"
	Dir       string // the data directory

	logPath string
	bin     string
	console string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// URL is the gocloud.dev/blob URL of the bucket (s3blob, AWS SDK v2): path-style
// requests to the loopback endpoint, over plain HTTP as the endpoint says.
func (m *MinIO) URL() string {
	return fmt.Sprintf("s3://%s?endpoint=%s&use_path_style=true&region=%s", m.Bucket, m.Endpoint, m.Region)
}

// SetEnv points the AWS SDK's default configuration at this server's credentials
// and region for the rest of the test (t.Setenv: not in parallel tests). A
// session token, profile or endpoint override from the environment is cleared.
func (m *MinIO) SetEnv(t testing.TB) {
	t.Helper()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":     m.AccessKey,
		"AWS_SECRET_ACCESS_KEY": m.SecretKey,
		"AWS_REGION":            m.Region,
		"AWS_SESSION_TOKEN":     "",
		"AWS_PROFILE":           "",
		"AWS_ENDPOINT_URL":      "",
		"AWS_ENDPOINT_URL_S3":   "",
	} {
		t.Setenv(k, v)
	}
}

// Client is an S3 client for the server, signed with the root credentials.
func (m *MinIO) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(m.Endpoint),
		Region:       m.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, ""),
	})
}

// Log returns the server's output so far, for failure messages.
func (m *MinIO) Log() string {
	b, _ := os.ReadFile(m.logPath)
	return string(b)
}

// StartMinIO starts `minio server` on a free 127.0.0.1 port with a fresh data
// directory and random root credentials (console off, update checks and call-home
// off), waits until it is ready, creates the bucket "mediajobs-test", and stops
// the server when the test ends. Without the binary it fails in CI and skips
// otherwise.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	m, err := RunMinIO(MinIOBinary(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// RunMinIO is StartMinIO outside a test (the cluster harness): the server keeps
// its data under dir and runs until Close.
func RunMinIO(bin, dir string) (*MinIO, error) {
	// A free port can be taken by another process between our check and the
	// server's bind (packages test in parallel); the server then exits, and new
	// ports are tried.
	var m *MinIO
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		m, err = startMinIO(bin, filepath.Join(dir, fmt.Sprint(attempt)))
		if err == nil || !errors.Is(err, errMinIOExited) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(m.Bucket)}); err != nil {
		m.Close()
		return nil, fmt.Errorf("minio: create bucket %s: %v; log tail:\n%s", m.Bucket, err, tail(m.Log(), 3000))
	}
	return m, nil
}

var errMinIOExited = errors.New("minio server exited")

func startMinIO(bin, dir string) (*MinIO, error) {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	addrs, err := FreeAddrs(2) // the S3 API and the (disabled) console
	if err != nil {
		return nil, err
	}
	m := &MinIO{
		Endpoint:  "http://" + addrs[0],
		AccessKey: "mj" + randomHex(9),
		SecretKey: randomHex(20),
		Bucket:    "mediajobs-test",
		Region:    "us-east-1",
		Dir:       data,
		logPath:   filepath.Join(dir, "minio.log"),
		bin:       bin,
		console:   addrs[1],
	}
	if err := m.start(); err != nil {
		return nil, err
	}
	return m, nil
}

// start runs the server on m's address, credentials and data, and waits until
// it is ready.
func (m *MinIO) start() error {
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	// The console is off (MINIO_BROWSER=off); its address is pinned to loopback
	// all the same, so that nothing listens beyond 127.0.0.1.
	cmd := exec.Command(m.bin, "server", "--address", strings.TrimPrefix(m.Endpoint, "http://"), "--console-address", m.console, m.Dir)
	cmd.Env = append(minioFreeEnv(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_REGION="+m.Region,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CALLHOME_ENABLE=off",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A test binary killed by its -timeout runs no Cleanup: the server goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("minio: %w", err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() { cmd.Wait(); close(m.exited) }()

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		resp, err := client.Get(m.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			m.Close()
			return fmt.Errorf("minio server not ready after 60s (last: %s); log tail:\n%s", last, tail(m.Log(), 3000))
		}
		select {
		case <-m.exited:
			return fmt.Errorf("%w while starting; log tail:\n%s", errMinIOExited, tail(m.Log(), 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// minioFreeEnv is this process's environment without MINIO_* variables, which
// would configure the server beyond what StartMinIO sets.
func minioFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MINIO_") {
			env = append(env, kv)
		}
	}
	return env
}

// Close stops the server (its data stays in Dir).
func (m *MinIO) Close() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
	m.cmd = nil
}

// Kill stops the server at once (SIGKILL), as a crash: its data stays.
func (m *MinIO) Kill() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
}

// Restart starts a stopped server again on the same address, credentials and
// data, and waits until it is ready.
func (m *MinIO) Restart() error {
	if m.cmd != nil {
		return errors.New("minio: still running")
	}
	return m.start()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
