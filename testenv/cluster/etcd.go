package cluster

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// memberEnv carries an etcd member's spec to a re-executed harness binary: the
// harness runs each member as its own process (so that one can be killed -9)
// from the etcd server it already links, with no etcd binary to install.
const memberEnv = "MEDIAJOBS_CLUSTER_ETCD_MEMBER"

type memberSpec struct {
	Name           string
	Dir            string
	Client, Peer   string // host:port
	InitialCluster string // name=http://peer,...
}

// MemberMain runs an etcd member and exits when this process was started as one
// by the harness; otherwise it returns at once. Call it first in main and TestMain.
func MemberMain() {
	raw := os.Getenv(memberEnv)
	if raw == "" {
		return
	}
	var spec memberSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(2)
	}
	if err := runMember(spec); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runMember(s memberSpec) error {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = s.Name, s.Dir
	cu, _ := url.Parse("http://" + s.Client)
	pu, _ := url.Parse("http://" + s.Peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = s.InitialCluster
	cfg.InitialClusterToken = "mediajobs-cluster"
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once Dir holds data (a restart)
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "10m"
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.Must(zap.NewProductionConfig().Build()))
	cfg.LogOutputs = []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd member %s ready: client %s, peer %s\n", s.Name, s.Client, s.Peer)
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("not ready after 2m")
	case <-sig:
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
}

// memberProcs makes the three members' processes (not started).
func memberProcs(self, dir string, addrs []string) []*Proc {
	n := len(addrs) / 2
	var initial []string
	for i := 0; i < n; i++ {
		initial = append(initial, fmt.Sprintf("etcd%d=http://%s", i+1, addrs[n+i]))
	}
	procs := make([]*Proc, n)
	for i := range procs {
		name := fmt.Sprintf("etcd%d", i+1)
		spec, _ := json.Marshal(memberSpec{
			Name: name, Dir: fmt.Sprintf("%s/%s/data", dir, name),
			Client: addrs[i], Peer: addrs[n+i], InitialCluster: strings.Join(initial, ","),
		})
		procs[i] = &Proc{Name: name, Bin: self, Env: []string{memberEnv + "=" + string(spec)}, Dir: dir + "/" + name}
	}
	return procs
}
