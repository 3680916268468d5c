package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// `accounts limits NAME -SETTING N` stores the account's own limits in etcd,
// shows them with the defaults and the use, and -1 gives a default back.
func TestAccountLimitsCommand(t *testing.T) {
	_, e := testenv.Etcd(t)
	cfg := filepath.Join(t.TempDir(), "mediajobs.hcl")
	os.WriteFile(cfg, []byte(`etcd {
  embedded  = false
  endpoints = ["`+e.Endpoint()+`"]
  prefix    = "/limitstest/"
}
limits {
  max_queued_jobs = 50
}
`), 0o600)
	limits := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := run(context.Background(), append(append([]string{"accounts", "limits"}, args...), "-config", cfg), &out, &out)
		return code, out.String()
	}
	row := func(out, name, value, from string) bool {
		return regexp.MustCompile(`(?m)^` + name + `\s+` + value + `\s+` + from + `\b`).MatchString(out)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"accounts", "create", "-name", "acme", "-config", cfg}, &out, &out); code != 0 {
		t.Fatalf("accounts create: %d %s", code, out.String())
	}
	code, got := limits("acme")
	if code != 0 || !row(got, "max_queued_jobs", "50", "default") || !row(got, "max_job_bytes", "268435456", "default") || !row(got, "weight", "1", "default") {
		t.Fatalf("limits acme: exit %d\n%s", code, got)
	}
	code, got = limits("acme", "-max-queued-jobs", "7", "--weight", "3", "-max-running-per-account", "2")
	if code != 0 || !row(got, "max_queued_jobs", "7", "account") || !row(got, "weight", "3", "account") || !row(got, "max_running_per_account", "2", "account") {
		t.Fatalf("limits set: exit %d\n%s", code, got)
	}
	s := store.New(e.Client, "/limitstest/")
	a, err := s.AccountByName(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	scheds, err := s.AccountSchedules(context.Background())
	if sc := scheds[a.ID]; err != nil || sc.Weight != 3 || sc.MaxRunningPerPool == nil || *sc.MaxRunningPerPool != 2 || sc.MaxQueuedJobs == nil || *sc.MaxQueuedJobs != 7 {
		t.Fatalf("stored settings %+v, %v", scheds[a.ID], err)
	}
	// The limits of storage, event streams and input bytes.
	if !row(got, "max_storage_bytes", "10737418240", "default") || !row(got, "max_event_streams", "16", "default") || !row(got, "max_input_bytes", "0", "default") {
		t.Fatalf("defaults of the new limits:\n%s", got)
	}
	code, got = limits("acme", "-max-storage-bytes", "1000", "-max-event-streams", "2", "-max-input-bytes", "5000")
	if code != 0 || !row(got, "max_storage_bytes", "1000", "account") || !row(got, "max_event_streams", "2", "account") || !row(got, "max_input_bytes", "5000", "account") {
		t.Fatalf("limits set: exit %d\n%s", code, got)
	}
	if l, _, _, err := s.AccountLimits(context.Background(), a.ID, store.Limits{}); err != nil || l.MaxStorageBytes != 1000 || l.MaxEventStreams != 2 || l.MaxInputBytes != 5000 {
		t.Fatalf("stored limits %+v, %v", l, err)
	}
	code, got = limits("-account", "acme", "-max-queued-jobs", "-1")
	if code != 0 || !row(got, "max_queued_jobs", "50", "default") || !row(got, "weight", "3", "account") {
		t.Fatalf("back to the default: exit %d\n%s", code, got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nobody"}, "no account named"},
		{[]string{}, "name is required"},
		{[]string{"acme", "-max-job-bytes", "-5"}, "-1 for the default"},
		{[]string{"acme", "-weight", "0"}, "weight is 1 or more"},
	} {
		if code, got := limits(c.args...); code == 0 || !strings.Contains(got, c.want) {
			t.Fatalf("limits %v: exit %d\n%s", c.args, code, got)
		}
	}
}
