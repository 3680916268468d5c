// Command mediajobs-cluster is what `make cluster` runs: the multi-process
// cluster of package testenv/cluster (3 etcd members, 3 Nomad servers behind a
// proxy and 2 clients, MinIO, 2 gateways, 2 dispatchers, and the 2 warm runners
// of pool "short") on loopback, for a person to try until Ctrl-C or SIGTERM
// stops it.
// Not for production.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mediajobs/mediajobs/testenv/cluster"
)

func main() {
	cluster.MemberMain() // this binary is also each etcd member
	dir := flag.String("dir", ".data/cluster", "the cluster's files; emptied at start")
	bin := flag.String("mediajobs", "bin/mediajobs", "the mediajobs binary")
	nomad := flag.String("nomad", os.Getenv("NOMAD_BIN"), "the nomad binary (default $NOMAD_BIN)")
	minio := flag.String("minio", os.Getenv("MINIO_BIN"), "the minio binary (default $MINIO_BIN)")
	flag.Parse()
	if err := run(*dir, *bin, *nomad, *minio); err != nil {
		fmt.Fprintln(os.Stderr, "mediajobs-cluster:", err)
		os.Exit(1)
	}
}

func run(dir, bin, nomad, minio string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	// A fresh cluster each time: a member's old data would name another cluster.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	addr2 := os.Getenv("MEDIAJOBS_HTTP_ADDR2")
	if addr2 == "" {
		addr2 = "127.0.0.1:8081"
	}
	addr1 := os.Getenv("MEDIAJOBS_HTTP_ADDR")
	if addr1 == "" {
		addr1 = "127.0.0.1:8080"
	}
	started := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Dir: abs(dir), Mediajobs: abs(bin), Nomad: nomad, MinIO: minio,
		GatewayAddrs: [2]string{addr1, addr2},
		APIKey:       os.Getenv("MEDIAJOBS_DEV_API_KEY"),
		Progress:     os.Stdout,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("stopping the cluster")
		c.Close()
	}()
	fmt.Printf(`
mediajobs cluster is up (%s).

  API         %[2]s/api  and  %[3]s/api  (two gateways, no shared disk)
              %[11]s/api  (a load balancer over both: every public_url)
  API key     %[4]s
  etcd        %[5]s
  Nomad       %[6]s (UI: %[6]s/ui/jobs), a proxy over servers %[16]s
              clients %[7]s
  warm pool   machine %[12]q: jobs with timeout_seconds <= %[13]d run on the %[14]d runners
              of Nomad job %[15]s, which lease them through %[11]s
  MinIO       %[8]s, bucket %[9]s
  files       %[10]s (configs, data and a log per process)

Try it: create through one gateway (waiting for the result), read through the other.
  curl -s -H "Authorization: Bearer %[4]s" -H "Content-Type: application/json" \
    -d '{"output_files":["out.mp4"],"ffmpeg_commands":["-f lavfi -i testsrc=duration=3 -c:v libx264 {{out.mp4}}"]}' \
    '%[2]s/api/ffmpeg?wait=true'
  curl -s -H "Authorization: Bearer %[4]s" '%[3]s/api/jobs/JOB_ID'
The same on a warm runner (the job's worker.path says "warm"):
  curl -s -H "Authorization: Bearer %[4]s" -H "Content-Type: application/json" \
    -d '{"machine":"%[12]s","timeout_seconds":30,"output_files":["out.mp4"],"ffmpeg_commands":["-f lavfi -i testsrc=duration=3 -c:v libx264 {{out.mp4}}"]}' \
    '%[2]s/api/ffmpeg?wait=true'

Ctrl-C stops everything.
`, time.Since(started).Round(time.Second), c.GatewayURLs[0], c.GatewayURLs[1], c.APIKey,
		strings.Join(c.EtcdEndpoints, " "), c.NomadAddr, c.NomadClients[0].Name+", "+c.NomadClients[1].Name,
		c.MinIO.Endpoint, c.MinIO.Bucket, abs(dir), c.PublicURL,
		cluster.WarmPool, cluster.WarmMaxJobSeconds, cluster.WarmRunners, cluster.WarmJobID, strings.Join(c.NomadServerAddrs, " "))
	<-ctx.Done()
	return nil
}
