// Package cluster starts mediajobs the way it is deployed beyond one machine, on
// one machine: a 3-member etcd cluster, three Nomad servers (behind a proxy, as
// nomad.address names one address) with two client agents, MinIO, two gateways
// with no shared disk and two dispatchers, each its own process on loopback
// ports, each gateway and dispatcher with its own config file rendered from one
// template, and the warm runners of pool WarmPool (Nomad's service job
// mediajobs-short-warm, docs/warm.md). Tests kill and restart its processes to
// inject faults; `make cluster` starts it for a person to try.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Options say where the cluster's pieces come from. Binaries are required.
type Options struct {
	Dir       string // every process's files, logs and config
	Self      string // this binary, re-executed as each etcd member (default os.Executable)
	Mediajobs string // the mediajobs binary: gateways, dispatchers and the runner
	Nomad     string // the nomad binary
	MinIO     string // the minio binary

	// GatewayAddrs are the two gateways' listen addresses ("" picks a free port).
	GatewayAddrs [2]string
	// APIKey is the "dev" account's key (default: a new one).
	APIKey string
	// ClientCPU is each Nomad client's compute in MHz (default 2200): four of the
	// cpu pool's 500 MHz jobs run at a time per client, beside one warm runner
	// (WarmRunnerCPU).
	ClientCPU int
	// ExtraHCL is appended to every gateway's and dispatcher's config.
	ExtraHCL string
	// Progress, when set, gets a line as each piece comes up.
	Progress io.Writer
}

// Cluster is a running cluster. Its fields are the processes, for faults.
type Cluster struct {
	Etcd         []*Proc // etcd1..3
	NomadServers []*Proc // nomad-server1..3
	NomadClients []*Proc // nomad-client1..2
	Gateways     []*Proc // gateway1..2
	Dispatchers  []*Proc // dispatcher1..2
	MinIO        *testenv.MinIO

	EtcdEndpoints []string // http://host:port of each member
	// NomadAddr is a proxy in front of the servers' HTTP APIs (and UI), which
	// goes to the next server when one is down: every process's nomad.address.
	NomadAddr string
	// NomadServerAddrs are each server's own HTTP API; NomadServerRPC their
	// RPC addresses, as Nomad names its raft leader.
	NomadServerAddrs []string
	NomadServerRPC   []string
	GatewayURLs      []string // http://host:port of each gateway
	// PublicURL is a load balancer in front of both gateways: every process's
	// server.public_url, so runners reach whichever gateway is up.
	PublicURL string
	APIKey    string
	Prefix    string // the etcd key prefix of mediajobs' records
	Nomad     *api.Client
	Etcd3     *clientv3.Client // on every member
	Store     *store.Store

	opts       Options
	lb         *http.Server
	nomadLB    *http.Server
	nomadLog   *os.File      // the proxy's errors
	nomadPeers []*api.Client // each server's own API
}

// The warm pool every gateway and dispatcher configures (docs/warm.md): jobs on
// machine WarmPool whose timeout_seconds is at most WarmMaxJobSeconds run on
// its WarmRunners long-lived runners, which lease them through PublicURL.
const (
	WarmPool          = "short"
	WarmRunners       = 2
	WarmMaxJobSeconds = 60
	WarmRunnerCPU     = 200 // MHz per runner
)

// Start brings the whole cluster up and returns once every gateway answers
// /readyz, the Nomad servers agree on a leader, both Nomad clients are ready, a
// dispatcher leads and the warm runners wait for work. On an error, what was
// started is stopped.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Self == "" {
		if o.Self, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if o.ClientCPU == 0 {
		o.ClientCPU = 4*500 + WarmRunnerCPU
	}
	for _, b := range []struct{ name, path string }{{"mediajobs", o.Mediajobs}, {"nomad", o.Nomad}, {"minio", o.MinIO}} {
		if b.path == "" {
			return nil, fmt.Errorf("cluster: no %s binary given", b.name)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	// Whose cluster this is, for SweepStale.
	if err := os.WriteFile(filepath.Join(o.Dir, "harness.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, err
	}
	c = &Cluster{opts: o, Prefix: "/mediajobs/"}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	say := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, format+"\n", args...)
		}
	}

	// Every port at once, so that none is handed out twice.
	addrs, err := testenv.FreeAddrs(6 + 3*3 + 2*3 + 2)
	if err != nil {
		return nil, err
	}
	port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }

	// etcd: three members, started together (each waits for a quorum).
	c.Etcd = memberProcs(o.Self, o.Dir, addrs[:6])
	for i, p := range c.Etcd {
		if err := p.Start(); err != nil {
			return c, err
		}
		c.EtcdEndpoints = append(c.EtcdEndpoints, "http://"+addrs[i])
	}
	c.Etcd3, err = clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return c, err
	}
	if err := c.waitEtcd(ctx); err != nil {
		return c, err
	}
	say("etcd cluster up: %s", strings.Join(c.EtcdEndpoints, ", "))

	// Nomad: three servers (each waits for the others), a proxy in front of
	// their HTTP APIs, then two clients that know all three.
	n := addrs[6:15]
	var httpAddrs, serfs []string // host:port of each server
	for i := 0; i < 3; i++ {
		httpAddrs, serfs = append(httpAddrs, n[3*i]), append(serfs, n[3*i+2])
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("nomad-server%d", i+1)
		dir := filepath.Join(o.Dir, name)
		p := n[3*i:]
		if err := writeFile(filepath.Join(dir, "agent.hcl"), nomadServer(i, dir, port(p[0]), port(p[1]), port(p[2]), serfs)); err != nil {
			return c, err
		}
		proc := &Proc{Name: name, Bin: o.Nomad, Dir: dir, Tree: true, Args: []string{"agent", "-config", filepath.Join(dir, "agent.hcl")}}
		if err := proc.Start(); err != nil {
			return c, err
		}
		c.NomadServers = append(c.NomadServers, proc)
		c.NomadServerAddrs = append(c.NomadServerAddrs, "http://"+p[0])
		c.NomadServerRPC = append(c.NomadServerRPC, p[1])
		peer, err := nomadClientAt("http://"+p[0], &http.Client{Timeout: 3 * time.Second})
		if err != nil {
			return c, err
		}
		c.nomadPeers = append(c.nomadPeers, peer)
	}
	nomadLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return c, err
	}
	if c.nomadLog, err = os.OpenFile(filepath.Join(o.Dir, "nomad-proxy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		nomadLn.Close()
		return c, err
	}
	c.NomadAddr = "http://" + nomadLn.Addr().String()
	c.nomadLB = &http.Server{Handler: newNomadProxy(httpAddrs, c.nomadLog), ReadHeaderTimeout: 10 * time.Second}
	go c.nomadLB.Serve(nomadLn)
	if c.Nomad, err = nomadClientAt(c.NomadAddr, nil); err != nil {
		return c, err
	}
	if err := c.WaitNomadServers(ctx, 120*time.Second); err != nil {
		return c, err
	}
	n = addrs[15:21]
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("nomad-client%d", i+1)
		dir := filepath.Join(o.Dir, name)
		p := n[3*i:]
		if err := writeFile(filepath.Join(dir, "agent.hcl"), nomadClient(name, dir, port(p[0]), port(p[1]), port(p[2]), c.NomadServerRPC, o.ClientCPU)); err != nil {
			return c, err
		}
		proc := &Proc{Name: name, Bin: o.Nomad, Dir: dir, Tree: true, Args: []string{"agent", "-config", filepath.Join(dir, "agent.hcl")}}
		if err := proc.Start(); err != nil {
			return c, err
		}
		c.NomadClients = append(c.NomadClients, proc)
	}
	if err := c.WaitNomadClients(ctx, 120*time.Second); err != nil {
		return c, err
	}
	say("nomad: 3 servers (%s) behind %s, 2 clients ready", strings.Join(c.NomadServerAddrs, ", "), c.NomadAddr)

	// MinIO: the bucket every gateway and dispatcher shares, and nothing else.
	if c.MinIO, err = testenv.RunMinIO(o.MinIO, filepath.Join(o.Dir, "minio")); err != nil {
		return c, err
	}
	say("minio %s, bucket %s", c.MinIO.Endpoint, c.MinIO.Bucket)

	// The "dev" account and its key, straight in etcd, before anyone serves.
	c.Store = store.New(c.Etcd3, c.Prefix)
	c.APIKey = o.APIKey
	if c.APIKey == "" {
		c.APIKey = mj.NewAPIKeySecret()
	}
	if _, err := c.Store.EnsureAccount(ctx, "dev", "dev"); err != nil {
		return c, fmt.Errorf("create account: %w", err)
	}
	if _, err := c.Store.AddAPIKey(ctx, "dev", "dev", c.APIKey); err != nil {
		return c, fmt.Errorf("add key: %w", err)
	}

	// Gateways and dispatchers: one template, a file each.
	secret := mj.NewAPIKeySecret()
	gw := [2]string{o.GatewayAddrs[0], o.GatewayAddrs[1]}
	for i := range gw {
		if gw[i] == "" {
			gw[i] = addrs[21+i]
		}
		c.GatewayURLs = append(c.GatewayURLs, "http://"+gw[i])
	}
	lbLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return c, err
	}
	c.PublicURL = "http://" + lbLn.Addr().String()
	c.lb = &http.Server{Handler: newBalancer(c.GatewayURLs), ReadHeaderTimeout: 10 * time.Second}
	go c.lb.Serve(lbLn)
	for i := 0; i < 2; i++ {
		for _, role := range []string{"gateway", "dispatcher"} {
			name := fmt.Sprintf("%s%d", role, i+1)
			dir := filepath.Join(o.Dir, name)
			cfg, err := c.render(configData{
				Listen: gw[i], Public: c.PublicURL, Secret: secret, Endpoints: c.EtcdEndpoints, Prefix: c.Prefix,
				Nomad: c.NomadAddr, Storage: c.MinIO.URL(), Dir: dir, Runner: o.Mediajobs, Extra: o.ExtraHCL,
				WarmPool: WarmPool, WarmRunners: WarmRunners, WarmMaxJob: WarmMaxJobSeconds, WarmCPU: WarmRunnerCPU,
			})
			if err != nil {
				return c, err
			}
			if err := writeFile(filepath.Join(dir, "mediajobs.hcl"), cfg); err != nil {
				return c, err
			}
			p := &Proc{Name: name, Bin: o.Mediajobs, Dir: dir, Args: []string{role, "-config", filepath.Join(dir, "mediajobs.hcl")},
				Env: []string{
					"AWS_ACCESS_KEY_ID=" + c.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY=" + c.MinIO.SecretKey,
					"AWS_REGION=" + c.MinIO.Region, "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
				}}
			if err := p.Start(); err != nil {
				return c, err
			}
			if role == "gateway" {
				c.Gateways = append(c.Gateways, p)
			} else {
				c.Dispatchers = append(c.Dispatchers, p)
			}
		}
	}
	for i := range c.Gateways {
		if err := c.WaitGateway(ctx, i, 60*time.Second); err != nil {
			return c, err
		}
	}
	if _, err := c.WaitLeader(ctx, -1, 60*time.Second); err != nil {
		return c, err
	}
	say("gateways %s behind %s; dispatchers up, one leading", strings.Join(c.GatewayURLs, ", "), c.PublicURL)
	// The leader registers the warm job; its runners then lease through the
	// load balancer with their workload identities.
	if err := c.WaitWarm(ctx, 120*time.Second); err != nil {
		return c, err
	}
	say("%d warm runners of pool %q (Nomad job %s) wait for work", WarmRunners, WarmPool, WarmJobID)
	return c, nil
}

type configData struct {
	Listen, Public, Secret, Prefix, Nomad, Storage, Dir, Runner, Extra string
	Endpoints                                                          []string
	WarmPool                                                           string
	WarmRunners, WarmMaxJob, WarmCPU                                   int
}

// configTemplate is every gateway's and dispatcher's config: the same but for
// where a gateway listens (a dispatcher listens nowhere).
var configTemplate = template.Must(template.New("mediajobs.hcl").Funcs(template.FuncMap{"q": strconv.Quote}).Parse(`# Rendered by the cluster harness (testenv/cluster) for one process.
server {
  listen         = {{q .Listen}}
  public_url     = {{q .Public}}
  signing_secret = {{q .Secret}}
  # Test inputs and webhooks are served on loopback.
  allow_loopback = true
}
etcd {
  embedded  = false
  endpoints = [{{range $i, $e := .Endpoints}}{{if $i}}, {{end}}{{q $e}}{{end}}]
  prefix    = {{q .Prefix}}
}
nomad {
  address = {{q .Nomad}}
}
storage {
  # Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
  url  = {{q .Storage}}
  path = {{q (printf "%s/blobs" .Dir)}}
}
dispatcher {
  reconcile_every  = "2s"
  leader_ttl       = "3s"
  timeout_grace    = "5s"
  disconnect_grace = "10s"
}
webhooks {
  backoff_base = "300ms"
  backoff_cap  = "2s"
}
pool "cpu" {
  runner_command = {{q .Runner}}
  cpu            = 500
  memory         = 128
}
# Short jobs run on long-lived warm runners (docs/warm.md); a runner that stops
# renewing loses its job after lease_ttl.
pool {{q .WarmPool}} {
  runner_command = {{q .Runner}}
  cpu            = 500
  memory         = 128
  warm {
    count           = {{.WarmRunners}}
    max_job_seconds = {{.WarmMaxJob}}
    cpu             = {{.WarmCPU}}
    memory          = 256
    lease_ttl       = "6s"
  }
}
{{.Extra}}
`))

func (c *Cluster) render(d configData) (string, error) {
	var b bytes.Buffer
	err := configTemplate.Execute(&b, d)
	return b.String(), err
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

// poll calls cond every 100 ms until it is true, the timeout passes or ctx ends.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not after %s: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) waitEtcd(ctx context.Context) error {
	return poll(ctx, 60*time.Second, "etcd cluster healthy", func() (bool, error) {
		err := c.EtcdHealthy(ctx)
		return err == nil, err
	})
}

// SweepStale kills what runs in, and unmounts and removes, the directories under
// parent named prefix* that belong to no running process's cluster: a harness
// killed outright (a test's -timeout) runs no cleanup, and Pdeathsig reaches only
// its direct children.
func SweepStale(parent, prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, prefix+"*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue // another run's, just made
		}
		if owner, err := os.ReadFile(filepath.Join(d, "harness.pid")); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(owner))); pid > 0 && syscall.Kill(pid, 0) == nil {
				continue // its harness still runs
			}
		}
		testenv.KillUnder(d)
		testenv.UnmountUnder(d)
		os.RemoveAll(d)
	}
}

// EtcdHealthy checks that every member answers and they agree on one leader.
func (c *Cluster) EtcdHealthy(ctx context.Context) error {
	var leader uint64
	for _, ep := range c.EtcdEndpoints {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Etcd3.Status(sctx, ep)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", ep, err)
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return fmt.Errorf("%s: no agreed leader", ep)
		}
		leader = st.Leader
	}
	return nil
}

// EtcdLeader is the index of the member that leads the raft group.
func (c *Cluster) EtcdLeader(ctx context.Context) (int, error) {
	for i, ep := range c.EtcdEndpoints {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Etcd3.Status(sctx, ep)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return -1, errors.New("no etcd leader")
}

// nomadClientAt is an API client of the Nomad at addr, with none of a
// developer's NOMAD_* settings.
func nomadClientAt(addr string, hc *http.Client) (*api.Client, error) {
	conf := api.DefaultConfig()
	conf.Address = addr
	conf.Region, conf.Namespace, conf.SecretID = "", "", ""
	conf.HttpClient = hc
	return api.NewClient(conf)
}

// NomadLeader is the index of the Nomad server that leads the raft group, as
// every running server says (each asked directly), or an error.
func (c *Cluster) NomadLeader() (int, error) {
	leader := ""
	for i, p := range c.NomadServers {
		if !p.Running() {
			continue
		}
		l, err := c.nomadPeers[i].Status().Leader()
		if err != nil {
			return -1, fmt.Errorf("%s: %w", p.Name, err)
		}
		if l == "" || (leader != "" && l != leader) {
			return -1, fmt.Errorf("%s: no agreed leader (%q, others %q)", p.Name, l, leader)
		}
		leader = l
	}
	for i, rpc := range c.NomadServerRPC {
		if rpc == leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("leader %q is no server of the cluster", leader)
}

// WaitNomadLeader waits until the running servers agree on a leader other than
// not (-1: any), and returns its index.
func (c *Cluster) WaitNomadLeader(ctx context.Context, not int, timeout time.Duration) (int, error) {
	leader := -1
	err := poll(ctx, timeout, "a Nomad leader", func() (bool, error) {
		i, err := c.NomadLeader()
		leader = i
		return err == nil && i != not, err
	})
	return leader, err
}

// NomadHealthy checks that all three servers run, agree on a leader, and are
// voters of its raft configuration.
func (c *Cluster) NomadHealthy() error {
	for _, p := range c.NomadServers {
		if !p.Running() {
			return fmt.Errorf("%s is not running", p.Name)
		}
	}
	leader, err := c.NomadLeader()
	if err != nil {
		return err
	}
	conf, err := c.nomadPeers[leader].Operator().RaftGetConfiguration(nil)
	if err != nil {
		return err
	}
	voters := map[string]bool{}
	for _, s := range conf.Servers {
		if s.Voter {
			voters[s.Address] = true
		}
	}
	for i, rpc := range c.NomadServerRPC {
		if !voters[rpc] {
			return fmt.Errorf("%s is no raft voter", c.NomadServers[i].Name)
		}
	}
	return nil
}

// WaitNomadServers waits until NomadHealthy.
func (c *Cluster) WaitNomadServers(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, "nomad servers healthy", func() (bool, error) {
		err := c.NomadHealthy()
		return err == nil, err
	})
}

// WaitNomadClients waits until both client nodes are ready with raw_exec.
func (c *Cluster) WaitNomadClients(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, "nomad clients ready", func() (bool, error) {
		nodes, _, err := c.Nomad.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "false"}})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range nodes {
			if d, ok := n.Drivers["raw_exec"]; ok && d.Healthy && n.Status == api.NodeStatusReady {
				ready++
			}
		}
		return ready == len(c.NomadClients), nil
	})
}

// NodeID is the Nomad node id of client i (0 or 1).
func (c *Cluster) NodeID(i int) (string, error) {
	nodes, _, err := c.Nomad.Nodes().List(nil)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.Name == c.NomadClients[i].Name {
			return n.ID, nil
		}
	}
	return "", fmt.Errorf("no node %s", c.NomadClients[i].Name)
}

// WaitGateway waits until gateway i answers /readyz with 200.
func (c *Cluster) WaitGateway(ctx context.Context, i int, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	p := c.Gateways[i]
	return poll(ctx, timeout, p.Name+" ready", func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("exited: %s", p.LogTail(2000))
		}
		resp, err := client.Get(c.GatewayURLs[i] + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("readyz: %s", resp.Status)
	})
}

// WarmJobID is the Nomad service job of WarmPool's runners.
var WarmJobID = mj.WarmJobID(WarmPool)

// WaitWarm waits until all WarmRunners runners wait for work (each holds a
// poll, so its idle key is in etcd).
func (c *Cluster) WaitWarm(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, fmt.Sprintf("%d warm runners waiting for work", WarmRunners), func() (bool, error) {
		idle, err := c.Store.WarmIdleRunners(ctx, WarmPool)
		return len(idle) == WarmRunners, err
	})
}

// Leader is the index of the leading dispatcher (the process whose pid the
// election key names), or -1.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := c.Etcd3.Get(sctx, c.Store.ElectionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return -1, err
	}
	if len(resp.Kvs) == 0 {
		return -1, nil
	}
	name := string(resp.Kvs[0].Value)
	for i, p := range c.Dispatchers {
		host := strings.SplitN(name, "@", 2)[0] // host:pid[@alloc]
		if pid := p.Pid(); pid != 0 && strings.HasSuffix(host, ":"+strconv.Itoa(pid)) {
			return i, nil
		}
	}
	return -1, nil
}

// WaitLeader waits until a dispatcher other than not (-1: any) leads.
func (c *Cluster) WaitLeader(ctx context.Context, not int, timeout time.Duration) (int, error) {
	leader := -1
	err := poll(ctx, timeout, "a leading dispatcher", func() (bool, error) {
		i, err := c.Leader(ctx)
		leader = i
		return i >= 0 && i != not, err
	})
	return leader, err
}

// AllProcs lists every process of the cluster but MinIO.
func (c *Cluster) AllProcs() []*Proc {
	out := append([]*Proc{}, c.Etcd...)
	out = append(out, c.NomadServers...)
	out = append(out, c.NomadClients...)
	out = append(out, c.Gateways...)
	return append(out, c.Dispatchers...)
}

// Close stops everything, clients first, and unmounts what Nomad clients mounted.
func (c *Cluster) Close() {
	parallel := func(procs []*Proc, stop func(*Proc)) {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			go func() { defer wg.Done(); stop(p) }()
		}
		wg.Wait()
	}
	graceful := func(p *Proc) { p.Stop(10 * time.Second) }
	if c.lb != nil {
		c.lb.Close()
	}
	parallel(append(append([]*Proc{}, c.Dispatchers...), c.Gateways...), graceful)
	parallel(c.NomadClients, func(p *Proc) {
		p.Kill() // with the tasks it runs: the cluster's files go with it
		testenv.UnmountUnder(p.Dir)
	})
	parallel(c.NomadServers, graceful)
	if c.nomadLB != nil {
		c.nomadLB.Close()
	}
	if c.nomadLog != nil {
		c.nomadLog.Close()
	}
	if c.MinIO != nil {
		c.MinIO.Close()
	}
	if c.Etcd3 != nil {
		c.Etcd3.Close()
	}
	parallel(c.Etcd, graceful)
}
