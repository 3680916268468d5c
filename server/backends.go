// Package server opens what a configuration names (etcd, the blob store, the
// signing secret, Nomad's clients) and runs the servers of one process: the
// gateway's API, the dispatcher, their side listeners, and `mediajobs dev`'s
// stack of all three. cmd/mediajobs wires its commands to it; the end-to-end
// tests (e2e/) start their dev stack with it.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/dispatcher"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/logging"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/webhook"
)

// Backends are the shared pieces every server command opens from the config.
type Backends struct {
	Config *config.Config
	Store  *store.Store
	Blobs  *blob.Bucket
	Signer blob.Signer
	// Log is the server's log, as the config's log block sets it (Open).
	Log   *slog.Logger
	close func()
}

// Close closes etcd (an embedded server, or the client) and quiets its log.
func (b *Backends) Close() { b.close() }

// Open opens the backends; etcd's warnings (its client's and an embedded
// server's) go to log, which b.Log keeps. Without secretFile the config must
// hold the signing secret; with it, a missing one is read from (or made in) it.
func Open(cfg *config.Config, secretFile string, log *slog.Logger) (*Backends, error) {
	if secretFile == "" { // refused before anything starts, as config check refuses it
		if err := cfg.RequireSigningSecret(); err != nil {
			return nil, err
		}
	}
	for _, w := range cfg.Warnings() { // what config check warns of
		log.Warn(w)
	}
	var st *store.Store
	var closeFn func()
	// etcd's warnings join the log, except for the noise of its closing.
	etcdLog, quiet := logging.ZapUntil(log)
	if cfg.Etcd.Embedded {
		e, err := store.StartEmbedded(cfg.Etcd.DataDir, cfg.Etcd.ListenClient, cfg.Etcd.ListenPeer, store.EmbeddedOptions{
			CompactionRetention: cfg.Etcd.CompactionRetentionD, QuotaBackendBytes: cfg.Etcd.QuotaBackendBytes,
			Logger: etcdLog,
		})
		if err != nil {
			return nil, err
		}
		st, closeFn = store.New(e.Client, cfg.Etcd.Prefix), func() { quiet(); e.Close() }
	} else {
		s, c, err := store.Dial(store.DialOptions{
			Endpoints: cfg.Etcd.Endpoints, DialTimeout: cfg.Etcd.DialTimeoutD,
			Username: cfg.Etcd.Username, Password: cfg.Etcd.Password, Logger: etcdLog,
		}, cfg.Etcd.Prefix)
		if err != nil {
			return nil, err
		}
		st, closeFn = s, func() { quiet(); c() }
	}
	blobs, err := OpenBlobs(cfg)
	if err != nil {
		closeFn()
		return nil, fmt.Errorf("storage: %w", err)
	}
	secret := cfg.Server.SigningSecret
	if secret == "" && secretFile != "" {
		if secret, err = fileSecret(secretFile); err != nil {
			closeFn()
			return nil, err
		}
	}
	if secret == "" {
		closeFn()
		return nil, cfg.RequireSigningSecret() // the check `mediajobs config check` makes
	}
	return &Backends{
		Config: cfg, Store: st, Blobs: blobs,
		Signer: blob.Signer{Secret: []byte(secret), Base: cfg.Server.PublicURL},
		close:  closeFn, Log: log,
	}, nil
}

// fileSecret reads a signing secret from path, creating a random one the first time.
func fileSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	b := make([]byte, 32)
	rand.Read(b)
	s := hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return s, os.WriteFile(path, []byte(s+"\n"), 0o600)
}

// Gateway builds the API and starts its key-revocation watch for ctx's lifetime.
func (b *Backends) Gateway(ctx context.Context, log *slog.Logger) *fiber.App {
	g := &gateway.Gateway{Config: b.Config, Store: b.Store, Blobs: b.Blobs, Signer: b.Signer, Log: log}
	if auth, err := WarmAuth(b.Config); err != nil {
		log.Warn("warm runners cannot be admitted", "err", err)
	} else {
		g.Warm = auth
	}
	if auth, addr, err := UploaderAuth(b.Config); err != nil {
		log.Warn("output_destinations cannot be handed out: workers' identities cannot be checked", "err", err)
	} else if config.PlainRemote(addr) && !b.Config.Server.AllowInsecureWarm {
		// Keys fetched in clear can be swapped, and identities forged: as
		// for warm pools, only with the operator's explicit opt-out.
		log.Error("output_destinations cannot be handed out: Nomad's address is plain http to another machine, so the keys that check workers' identities would be fetched in clear (use https, or set server.allow_insecure_warm on a network you trust)", "nomad", addr)
	} else {
		g.Uploaders = auth
	}
	go g.Watch(ctx)
	return g.App()
}

// nomadClients are the Nomad API clients of the config: one for bounded calls,
// one for the event stream.
func nomadClients(cfg *config.Config) (calls *api.Client, stream *api.Client, err error) {
	calls, stream, _, err = nomadClientsHTTP(cfg)
	return calls, stream, err
}

// nomadClientsHTTP is nomadClients, with the HTTP client of the bounded calls
// (Nomad's TLS settings applied; nil on a unix socket) for other calls to Nomad.
func nomadClientsHTTP(cfg *config.Config) (calls *api.Client, stream *api.Client, hc *http.Client, err error) {
	nc := api.DefaultConfig() // NOMAD_ADDR, NOMAD_TOKEN, ... then the HCL on top
	n := cfg.Nomad
	if n.Address != "" {
		nc.Address = n.Address
	}
	if n.Token != "" {
		nc.SecretID = n.Token
	}
	if n.Region != "" {
		nc.Region = n.Region
	}
	if n.Namespace != "" {
		nc.Namespace = n.Namespace
	}
	// The event stream is one long request; every other call is bounded, so a
	// half-open connection to Nomad cannot stall the dispatcher (the calls also
	// carry the leader's context). Two clients, then.
	// Copied before NewClient, which rewrites a unix:// address in place.
	c := *nc
	events, err := api.NewClient(nc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nomad client: %w", err)
	}
	if !strings.HasPrefix(c.Address, "unix:") { // a socket keeps the api's own client; contexts bound its calls
		tr := cleanhttp.DefaultPooledTransport()
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12} // as the api's own client
		c.HttpClient = &http.Client{Timeout: dispatcher.NomadTimeout, Transport: tr}
		// NewClient configures TLS only on a client it makes itself.
		if err := api.ConfigureTLS(c.HttpClient, c.TLSConfig); err != nil {
			return nil, nil, nil, fmt.Errorf("nomad client TLS: %w", err)
		}
	}
	client, err := api.NewClient(&c)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nomad client: %w", err)
	}
	return client, events, c.HttpClient, nil
}

// Dispatcher builds the dispatcher of the config; its runner command is this
// executable.
func (b *Backends) Dispatcher(log *slog.Logger) (*dispatcher.Dispatcher, error) {
	client, events, err := nomadClients(b.Config)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &dispatcher.Dispatcher{
		Config: b.Config, Store: b.Store, Jobs: client.Jobs(), Allocs: client.Allocations(), Events: events.EventStream(),
		Blobs: b.Blobs, Signer: b.Signer, RunnerCommand: self, Log: log,
		ReconcileEvery: b.Config.Dispatcher.ReconcileD, LeaderTTL: b.Config.Dispatcher.LeaderTTLD, TimeoutGrace: b.Config.Dispatcher.TimeoutGraceD,
		DisconnectGrace: b.Config.Dispatcher.DisconnectD,
		Accounts:        b.Store, Name: dispatcherName(),
		Webhook: &webhook.Sender{Base: b.Config.Webhooks.BaseD, Cap: b.Config.Webhooks.CapD,
			AttemptTimeout: b.Config.Webhooks.TimeoutD, Guard: b.Config.Guard(),
			MaxIdlePerHost: b.Config.Webhooks.Concurrency},
	}, nil
}

// dispatcherName is what the election key says of this dispatcher: host:pid, and
// under Nomad the allocation, since containers on one host may share host and pid.
func dispatcherName() string {
	host, _ := os.Hostname()
	name := host + ":" + strconv.Itoa(os.Getpid())
	if id := os.Getenv("NOMAD_ALLOC_ID"); len(id) >= 8 {
		name += "@" + id[:8]
	}
	return name
}

// OpenBlobs opens the configured store: storage.url, else the directory
// storage.path.
func OpenBlobs(cfg *config.Config) (*blob.Bucket, error) {
	if cfg.Storage.URL != "" {
		return blob.Open(context.Background(), cfg.Storage.URL)
	}
	return blob.NewLocal(cfg.Storage.Path)
}
