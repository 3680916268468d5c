package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

const limitsUsage = "usage: mediajobs accounts limits NAME [-weight N] [-max-running-per-account N] [-max-queued-jobs N] [-max-job-bytes N] [-max-timeout-seconds N] [-max-storage-bytes N] [-max-event-streams N] [-max-input-bytes N] [-reset]   [-config FILE]\n" +
	"  without a setting: print the account's limits and use; a setting of -1: back to the configured default (docs/limits.md)"

// configLimits are the configured defaults of the limits of amounts held.
func configLimits(l *config.Limits) store.Limits {
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return store.Limits{MaxQueuedJobs: val(l.MaxQueuedJobs), MaxJobBytes: val(l.MaxJobBytes), MaxTimeoutSeconds: val(l.MaxTimeoutSeconds),
		MaxStorageBytes: val(l.MaxStorageBytes), MaxEventStreams: val(l.MaxEventStreams), MaxInputBytes: val(l.MaxInputBytes)}
}

// runAccountLimits: `mediajobs accounts limits NAME [-SETTING N ...]` sets an
// account's own limits and fair-share weight in etcd (sched/<account>), then
// prints them with what the account holds; without a setting it only prints.
func runAccountLimits(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	cfgPath := configFlag(fs)
	acct := fs.String("account", "", "the account's name (or give it first)")
	weight := fs.Int64("weight", 0, "the account's fair-share weight (default 1)")
	running := fs.Int64("max-running-per-account", 0, "jobs of the account holding a pool's slots at once (0: no limit)")
	queued := fs.Int64("max-queued-jobs", 0, "jobs of the account queued at once (0: no limit)")
	jobBytes := fs.Int64("max-job-bytes", 0, "bytes of job records the account holds in etcd (0: no limit)")
	timeout := fs.Int64("max-timeout-seconds", 0, "the largest timeout_seconds of a job (0: the pool's max_timeout)")
	storage := fs.Int64("max-storage-bytes", 0, "bytes of temporary files and outputs the account holds in storage (0: no limit)")
	streams := fs.Int64("max-event-streams", 0, "event streams the account has open at once (0: no limit)")
	inputBytes := fs.Int64("max-input-bytes", 0, "bytes of inputs one job of the account may fetch (0: the pool's disk only)")
	reset := fs.Bool("reset", false, "drop every setting of the account: the configured defaults apply")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" {
		name = *acct
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), limitsUsage)
	case name == "":
		return errors.New("the account's name is required\n" + limitsUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	s, done, err := adminStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	a, err := accountNamed(ctx, s, name)
	if err != nil {
		return err
	}
	defaults := configLimits(cfg.Limits)
	_, _, sc, err := s.AccountLimits(ctx, a.ID, defaults)
	if err != nil {
		return err
	}
	if *reset {
		sc = store.Schedule{}
	}
	// Each setting given: its value, or with -1 the default again.
	override := func(flagName string, v int64, dst **int64) error {
		if !set[flagName] {
			return nil
		}
		switch {
		case v == -1:
			*dst = nil
		case v < 0:
			return fmt.Errorf("-%s %d: give 0 or more, or -1 for the default", flagName, v)
		default:
			*dst = &v
		}
		return nil
	}
	var w, r *int64
	changed := false
	if sc.Weight > 0 {
		w = ptr(int64(sc.Weight))
	}
	if sc.MaxRunningPerPool != nil {
		r = ptr(int64(*sc.MaxRunningPerPool))
	}
	for _, o := range []struct {
		name string
		v    int64
		dst  **int64
	}{
		{"weight", *weight, &w},
		{"max-running-per-account", *running, &r},
		{"max-queued-jobs", *queued, &sc.MaxQueuedJobs},
		{"max-job-bytes", *jobBytes, &sc.MaxJobBytes},
		{"max-timeout-seconds", *timeout, &sc.MaxTimeoutSeconds},
		{"max-storage-bytes", *storage, &sc.MaxStorageBytes},
		{"max-event-streams", *streams, &sc.MaxEventStreams},
		{"max-input-bytes", *inputBytes, &sc.MaxInputBytes},
	} {
		if err := override(o.name, o.v, o.dst); err != nil {
			return err
		}
		changed = changed || set[o.name]
	}
	if set["weight"] && w != nil && *w == 0 {
		return errors.New("-weight 0: a weight is 1 or more (-1: the default, 1)")
	}
	sc.Weight, sc.MaxRunningPerPool = 0, nil
	if w != nil {
		sc.Weight = int(*w)
	}
	if r != nil {
		sc.MaxRunningPerPool = ptr(int(*r))
	}
	if *reset || changed {
		if err := s.SetAccountSchedule(ctx, a.ID, sc); err != nil {
			return err
		}
	}
	l, u, sc, err := s.AccountLimits(ctx, a.ID, defaults)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "account %s (%s)\n", a.Name, a.ID)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM\tIN USE")
	from := func(own bool) string {
		if own {
			return "account"
		}
		return "default"
	}
	wv := int64(sc.Weight)
	if wv == 0 {
		wv = 1
	}
	rv := int64(cfg.Limits.MaxRunningPerAccount)
	if sc.MaxRunningPerPool != nil {
		rv = int64(*sc.MaxRunningPerPool)
	}
	fmt.Fprintf(tw, "weight\t%d\t%s\t\n", wv, from(sc.Weight != 0))
	fmt.Fprintf(tw, "max_running_per_account\t%d\t%s\t\n", rv, from(sc.MaxRunningPerPool != nil))
	fmt.Fprintf(tw, "max_queued_jobs\t%d\t%s\t%d\n", l.MaxQueuedJobs, from(sc.MaxQueuedJobs != nil), u.QueuedJobs)
	fmt.Fprintf(tw, "max_job_bytes\t%d\t%s\t%d\n", l.MaxJobBytes, from(sc.MaxJobBytes != nil), u.JobBytes)
	fmt.Fprintf(tw, "max_timeout_seconds\t%d\t%s\t\n", l.MaxTimeoutSeconds, from(sc.MaxTimeoutSeconds != nil))
	fmt.Fprintf(tw, "max_storage_bytes\t%d\t%s\t%d\n", l.MaxStorageBytes, from(sc.MaxStorageBytes != nil), u.StorageBytes)
	fmt.Fprintf(tw, "max_event_streams\t%d\t%s\t%d\n", l.MaxEventStreams, from(sc.MaxEventStreams != nil), u.EventStreams)
	fmt.Fprintf(tw, "max_input_bytes\t%d\t%s\t\n", l.MaxInputBytes, from(sc.MaxInputBytes != nil))
	return tw.Flush()
}

func ptr[T any](v T) *T { return &v }
