package store

import (
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Embedded is a single-node etcd server inside this process, for one-machine
// deployments (`mediajobs dev`) and tests. Its data survives restarts in dir.
type Embedded struct {
	etcd   *embed.Etcd
	Client *clientv3.Client
}

// Defaults of EmbeddedOptions (and of the etcd.compaction_retention and
// etcd.quota_backend_bytes settings).
const (
	DefaultCompactionRetention = 10 * time.Minute
	DefaultQuotaBackendBytes   = int64(8 << 30)
)

// EmbeddedOptions keep the embedded etcd small. Zero fields take the defaults above.
type EmbeddedOptions struct {
	// CompactionRetention: etcd compacts periodically to the revision of this long
	// ago (--auto-compaction-mode=periodic); under an hour it compacts that often.
	CompactionRetention time.Duration
	// QuotaBackendBytes: past this database size etcd raises the NOSPACE alarm and
	// refuses writes (--quota-backend-bytes).
	QuotaBackendBytes int64
	// Logger receives etcd's own log (the server's and the client's); nil discards it.
	Logger *zap.Logger
	// FastStart elects the single member at once (10 ms ticks, a 100 ms election
	// timeout, where etcd's defaults take about half a second): for tests, which
	// start hundreds of servers. A lone member never holds another election, so
	// the short timeout costs nothing after the start.
	FastStart bool
}

// StartEmbedded starts etcd keeping its data in dir, serving clients on clientAddr
// (host:port; port 0 picks a free one) and peers on peerAddr. At most one opts is
// used; without one, the defaults apply.
func StartEmbedded(dir, clientAddr, peerAddr string, opts ...EmbeddedOptions) (*Embedded, error) {
	var o EmbeddedOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	e, err := embed.StartEtcd(embedConfig(dir, clientAddr, peerAddr, o))
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not become ready within 60s")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + e.Clients[0].Addr().String()},
		DialTimeout: 5 * time.Second,
		Logger:      o.logger(),
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	return &Embedded{etcd: e, Client: cli}, nil
}

func (o EmbeddedOptions) logger() *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger
}

// embedConfig is the etcd configuration StartEmbedded starts.
func embedConfig(dir, clientAddr, peerAddr string, o EmbeddedOptions) *embed.Config {
	if o.CompactionRetention <= 0 {
		o.CompactionRetention = DefaultCompactionRetention
	}
	if o.QuotaBackendBytes <= 0 {
		o.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(o.logger())
	cu, _ := url.Parse("http://" + clientAddr)
	pu, _ := url.Parse("http://" + peerAddr)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// etcd's default retention "0" keeps every revision forever.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = o.CompactionRetention.String()
	cfg.QuotaBackendBytes = o.QuotaBackendBytes
	if o.FastStart {
		cfg.TickMs, cfg.ElectionMs = 10, 100
	}
	return cfg
}

// Endpoint is the client URL the server actually listens on.
func (e *Embedded) Endpoint() string { return "http://" + e.etcd.Clients[0].Addr().String() }

// Close stops the client and the server.
func (e *Embedded) Close() {
	e.Client.Close()
	e.etcd.Close()
}
