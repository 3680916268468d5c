package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/workload"
)

// stubAllocJobs answers which job an allocation belongs to, and its status.
type stubAllocJobs map[string][2]string

func (a stubAllocJobs) AllocJob(_ context.Context, id string) (string, string, error) {
	if s, ok := a[id]; ok && s[0] == "down" {
		return "", "", errors.New("dial tcp 127.0.0.1:4646: connect: connection refused")
	}
	return a[id][0], a[id][1], nil // unknown: "", ""
}

// running marks job id running its first attempt on worker w, and has the
// gateway check uploaders with a stub verifier and Nomad (returned).
func running(t *testing.T, h *harness, id string, w *mj.Worker) (stubVerifier, stubAllocJobs) {
	t.Helper()
	if _, err := h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error {
		j.Status, j.Attempt, j.NomadJobID, j.Worker = mj.StatusRunning, 1, w.NomadJobID, w
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if h.gw.Uploaders == nil {
		h.gw.Uploaders = &UploaderAuth{Verifier: stubVerifier{}, Allocs: stubAllocJobs{}}
	}
	return h.gw.Uploaders.Verifier.(stubVerifier), h.gw.Uploaders.Allocs.(stubAllocJobs)
}

// identity makes v accept a token of Nomad job job's allocation alloc, and
// returns it as an Authorization header.
func identity(v stubVerifier, job, alloc string) string {
	tok := "tok-" + job + "-" + alloc
	v[tok] = workload.Claims{Namespace: "default", JobID: job, AllocationID: alloc}
	return "Bearer " + tok
}

// askUploads posts to job id's first attempt's upload-links URL, as whoever
// read it from the dispatch payload, with the Authorization header auth ("" for
// none).
func askUploads(h *harness, id, body, auth string) (int, map[string]any) {
	scope := fmt.Sprintf("jobs/%s/1/uploads", id)
	u, _ := url.Parse(h.gw.Signer.URLFor("/upload-urls/", "UPLOADS", scope, scope, time.Now().Add(time.Hour)))
	var hdr []string
	if auth != "" {
		hdr = []string{"Authorization", auth}
	}
	status, resp, _ := h.do("POST", u.RequestURI(), "", body, hdr...)
	return status, resp
}

// dispatchedAs marks job id running as the dispatched child of the cpu pool on
// allocation alloc (recorded on the job), and returns that allocation's identity
// (Nomad names the parent job in a dispatched job's identities).
func dispatchedAs(t *testing.T, h *harness, id, alloc string) string {
	t.Helper()
	v, _ := running(t, h, id, &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: testChild, AllocationID: alloc})
	return identity(v, "mediajobs-cpu", alloc)
}

const (
	testChild  = "mediajobs-cpu/dispatch-1764300000-0a1b2c3d"
	testAlloc  = "5b7f3c1e-0d2a-4c8b-9e61-7a3f2b1c0d9e"
	otherAlloc = "9c8d7e6f-5a4b-4c3d-8e2f-1a0b9c8d7e6f"
)

// TestDestinationsOnlyToTheJobsAllocation: the upload-links URL (in the Nomad
// dispatch payload, readable by whoever may read Nomad's jobs) alone does not
// get the job's destinations: the caller must present the Nomad workload
// identity of an allocation running the job's current attempt. Asked for no
// output with a destination (a failed job's result), the links still come.
func TestDestinationsOnlyToTheJobsAllocation(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	req := valid()
	req["output_destinations"] = map[string]string{"out.mp4": presigned}
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	ask := `{"files":["result.json","outputs/out.mp4"],"destinations":true}`
	got := func(status int, body map[string]any) bool {
		d, _ := body["data"].(map[string]any)["destinations"].(map[string]any)
		return status == 200 && d["outputs/out.mp4"] == presigned
	}

	// Dispatched, the child not recorded yet: try again later.
	v, nomad := running(t, h, id, &mj.Worker{})
	if status, body := askUploads(h, id, ask, identity(v, "mediajobs-cpu", testAlloc)); status != 503 {
		t.Fatalf("before the child is recorded: %d %v", status, body)
	}
	// Recorded with its allocation.
	tok := dispatchedAs(t, h, id, testAlloc)
	for _, c := range []struct{ name, auth, code string }{
		{"no identity", "", "badApiKey"},
		{"an API key", "Bearer " + h.keys["alice"], "badApiKey"},
		{"a forged token", "Bearer forged", "badApiKey"},
		{"another allocation of the pool's job", identity(v, "mediajobs-cpu", otherAlloc), "forbidden"},
		{"the allocation, under another pool's job", identity(v, "mediajobs-nvidia", testAlloc), "forbidden"},
		{"a warm runner's identity", identity(v, "mediajobs-cpu-warm", testAlloc), "forbidden"},
	} {
		status, body := askUploads(h, id, ask, c.auth)
		if status/100 != 4 || body["errorCode"] != c.code || strings.Contains(fmt.Sprint(body), "5ec2e751") {
			t.Errorf("%s: %d %v, want %s", c.name, status, body, c.code)
		}
	}
	if status, body := askUploads(h, id, ask, ""); !strings.Contains(fmt.Sprint(body["message"]), "nomad_mediajobs.jwt") {
		t.Errorf("the refusal does not say what to send: %d %v", status, body)
	}
	if status, body := askUploads(h, id, ask, tok); !got(status, body) {
		t.Fatalf("the recorded allocation: %d %v", status, body)
	}
	// A failed job's result needs no identity: no destination is asked for.
	if status, body := askUploads(h, id, `{"files":["result.json"],"destinations":true}`, ""); status != 200 {
		t.Fatalf("a failed job's result: %d %v", status, body)
	}

	// An allocation the job does not record yet: Nomad says whose it is.
	other := identity(v, "mediajobs-cpu", otherAlloc)
	nomad[otherAlloc] = [2]string{"down"}
	if status, body := askUploads(h, id, ask, other); status != 503 {
		t.Fatalf("Nomad unreachable: %d %v", status, body)
	}
	delete(nomad, otherAlloc)
	if status, body := askUploads(h, id, ask, other); status != 403 {
		t.Fatalf("an allocation Nomad does not know: %d %v", status, body)
	}
	for _, c := range []struct{ job, client string }{{"mediajobs-cpu/dispatch-1764300000-ffffffff", "running"}, {testChild, "complete"}} {
		nomad[otherAlloc] = [2]string{c.job, c.client}
		if status, body := askUploads(h, id, ask, other); status != 403 {
			t.Fatalf("an allocation of %s, %s: %d %v", c.job, c.client, status, body)
		}
	}
	nomad[otherAlloc] = [2]string{testChild, "running"}
	if status, body := askUploads(h, id, ask, other); !got(status, body) {
		t.Fatalf("another running allocation of the recorded child: %d %v", status, body)
	}

	// On a warm runner: the pool's warm job, and the allocation the job was
	// handed to, not another of the same job.
	running(t, h, id, &mj.Worker{Path: mj.WorkerWarm, NomadJobID: "mediajobs-cpu-warm", AllocationID: testAlloc})
	if status, body := askUploads(h, id, ask, identity(v, "mediajobs-cpu-warm", otherAlloc)); status != 403 {
		t.Fatalf("another warm runner: %d %v", status, body)
	}
	if status, body := askUploads(h, id, ask, identity(v, "mediajobs-cpu-warm", testAlloc)); !got(status, body) {
		t.Fatalf("the warm runner the job was handed to: %d %v", status, body)
	}

	// A docker pool's child is asked for one too: its upload task, which has
	// none (a poststop task), presents the ticket its fetch task got
	// (TestDestinationsTicket); without either it gets nothing.
	h.gw.Config.Pools = append(h.gw.Config.Pools, &config.Pool{Name: "docker", Driver: "docker"})
	h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.Machine = "docker"; return nil })
	running(t, h, id, &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: "mediajobs-docker/dispatch-1", AllocationID: testAlloc})
	if status, body := askUploads(h, id, ask, ""); status != 401 || strings.Contains(fmt.Sprint(body), "5ec2e751") || !strings.Contains(fmt.Sprint(body["message"]), "fetch task") {
		t.Fatalf("a docker pool's child without identity or ticket: %d %v", status, body)
	}
	h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.Machine = "cpu"; return nil })

	// A gateway that cannot check identities hands out no destination, and
	// refuses (not a 503 the worker would wait out): the job fails at once with
	// what to fix.
	h.gw.Uploaders, h.gw.Warm = nil, nil
	if status, body := askUploads(h, id, ask, identity(v, "mediajobs-cpu-warm", testAlloc)); status != 403 || !strings.Contains(fmt.Sprint(body["message"]), "nomad.address") {
		t.Fatalf("no verifier: %d %v", status, body)
	}
}

// TestDestinationsTicket: a docker pool's fetch task, with its allocation's
// workload identity, gets a ticket that its upload task (no identity of its
// own) presents with the same upload-links URL for the destinations. The ticket
// is good only for that allocation, attempt and URL; it is given to no one
// without the identity, and a job without destinations needs neither.
func TestDestinationsTicket(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	h.gw.Config.Pools = append(h.gw.Config.Pools, &config.Pool{Name: "docker", Driver: "docker"})
	create := func(dests bool) string {
		req := valid()
		req["machine"] = "docker"
		if dests {
			req["output_destinations"] = map[string]string{"out.mp4": presigned}
		}
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
		if status != 200 {
			t.Fatalf("create: %d %v", status, body)
		}
		return body["data"].(map[string]any)["id"].(string)
	}
	id := create(true)
	v, _ := running(t, h, id, &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: "mediajobs-docker/dispatch-1", AllocationID: testAlloc})
	fetchID := identity(v, "mediajobs-docker", testAlloc)
	exp := time.Now().Add(time.Hour)
	// The attempt's upload-links URL, as the dispatch payload holds it.
	uploads := func(id string, attempt int, exp time.Time) string {
		scope := fmt.Sprintf("jobs/%s/%d/uploads", id, attempt)
		u, _ := url.Parse(h.gw.Signer.URLFor("/upload-urls/", "UPLOADS", scope, scope, exp))
		return u.RequestURI()
	}
	post := func(u string, body map[string]any, auth string) (int, map[string]any) {
		var hdr []string
		if auth != "" {
			hdr = []string{"Authorization", auth}
		}
		b, _ := json.Marshal(body)
		status, resp, _ := h.do("POST", u, "", string(b), hdr...)
		return status, resp
	}
	issue := func(alloc string) map[string]any {
		return map[string]any{"alloc": alloc, "files": []string{}, "destinations": true, "issue_ticket": true}
	}
	ticketOf := func(status int, body map[string]any) string {
		d, _ := body["data"].(map[string]any)
		tk, _ := d["ticket"].(string)
		if status != 200 || tk == "" || strings.Contains(fmt.Sprint(body), "5ec2e751") {
			t.Fatalf("no ticket: %d %v", status, body)
		}
		return tk
	}
	u := uploads(id, 1, exp)

	// No ticket without the allocation's identity.
	for _, c := range []struct{ name, alloc, auth, code string }{
		{"no identity", testAlloc, "", "badApiKey"},
		{"another allocation's identity", otherAlloc, identity(v, "mediajobs-docker", otherAlloc), "forbidden"},
		{"the identity, for another allocation", otherAlloc, fetchID, "forbidden"},
		{"the identity, for no allocation", "", fetchID, "forbidden"},
	} {
		status, body := post(u, issue(c.alloc), c.auth)
		if status/100 != 4 || body["errorCode"] != c.code || body["data"] != nil {
			t.Errorf("%s: %d %v, want %s", c.name, status, body, c.code)
		}
	}
	tk := ticketOf(post(u, issue(testAlloc), fetchID))
	// A fetch task that runs again gets the same ticket.
	if again := ticketOf(post(u, issue(testAlloc), fetchID)); again != tk {
		t.Fatalf("a second ticket differs: %q, %q", again, tk)
	}

	ask := func(alloc, ticket string) map[string]any {
		return map[string]any{"alloc": alloc, "files": []string{"result.json", "outputs/out.mp4"}, "destinations": true, "ticket": ticket}
	}
	got := func(status int, body map[string]any) bool {
		d, _ := body["data"].(map[string]any)["destinations"].(map[string]any)
		return status == 200 && d["outputs/out.mp4"] == presigned
	}
	if status, body := post(u, ask(testAlloc, tk), ""); !got(status, body) {
		t.Fatalf("the upload task with the ticket: %d %v", status, body)
	}
	tampered := []byte(tk)
	tampered[3] ^= 1
	for _, c := range []struct{ name, u, alloc, ticket string }{
		{"another allocation", u, otherAlloc, tk},
		{"no allocation", u, "", tk},
		{"a tampered ticket", u, testAlloc, string(tampered)},
		{"another upload-links URL of the attempt", uploads(id, 1, exp.Add(time.Minute)), testAlloc, tk},
	} {
		status, body := post(c.u, ask(c.alloc, c.ticket), "")
		if status != 403 || strings.Contains(fmt.Sprint(body), "5ec2e751") {
			t.Errorf("%s: %d %v, want 403", c.name, status, body)
		}
	}
	// Another job's ticket is not this job's.
	other := create(true)
	running(t, h, other, &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: "mediajobs-docker/dispatch-2", AllocationID: testAlloc})
	if status, body := post(uploads(other, 1, exp), ask(testAlloc, tk), ""); status != 403 {
		t.Errorf("another job's ticket: %d %v", status, body)
	}

	// The next attempt (a retry): the last one's ticket is no good for it, its
	// own allocation gets its own.
	if _, err := h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error {
		j.Attempt, j.Worker = 2, &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: "mediajobs-docker/dispatch-3", AllocationID: otherAlloc}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	u2 := uploads(id, 2, exp)
	if status, body := post(u2, ask(testAlloc, tk), ""); status != 403 {
		t.Errorf("the last attempt's ticket: %d %v", status, body)
	}
	if status, body := post(u2, ask(otherAlloc, tk), ""); status != 403 {
		t.Errorf("the last attempt's ticket, for the new allocation: %d %v", status, body)
	}
	if status, body := post(u, ask(testAlloc, tk), ""); status != 409 {
		t.Errorf("the last attempt's URL: %d %v", status, body)
	}
	tk2 := ticketOf(post(u2, issue(otherAlloc), identity(v, "mediajobs-docker", otherAlloc)))
	if status, body := post(u2, ask(otherAlloc, tk2), ""); !got(status, body) {
		t.Fatalf("the new attempt's ticket: %d %v", status, body)
	}

	// A job without destinations: no ticket, and no identity asked for.
	plain := create(false)
	running(t, h, plain, &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: "mediajobs-docker/dispatch-4", AllocationID: testAlloc})
	if status, body := post(uploads(plain, 1, exp), issue(testAlloc), ""); status != 200 || body["data"].(map[string]any)["ticket"] != nil {
		t.Fatalf("a job without destinations: %d %v", status, body)
	}
}
