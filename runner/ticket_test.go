package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// ticketGateway stands in for the gateway's /upload-urls/ of a docker pool's
// job: a ticket only to the caller with the workload identity, the destination
// only to a caller with that ticket. status, when set, answers every request.
type ticketGateway struct {
	mu      sync.Mutex
	dests   bool // the job has output_destinations
	status  int
	asked   []map[string]any // the bodies posted, with "auth" added
	dest    []byte           // what the destination received
	results int
}

const (
	testIdentity = "the-fetch-tasks-jwt"
	testTicket   = "the-ticket-5ec2e751"
)

func (g *ticketGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.status != 0 {
		http.Error(w, "no", g.status)
		return
	}
	switch {
	case r.URL.Path == "/links":
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		req["auth"] = r.Header.Get("Authorization")
		g.asked = append(g.asked, req)
		data := map[string]any{}
		if req["issue_ticket"] == true {
			switch {
			case !g.dests:
			case req["auth"] != "Bearer "+testIdentity:
				http.Error(w, `{"message":"send its workload identity"}`, http.StatusUnauthorized)
				return
			default:
				data["ticket"] = testTicket
			}
			json.NewEncoder(w).Encode(map[string]any{"data": data})
			return
		}
		urls, dests := map[string]string{}, map[string]string{}
		for _, f := range req["files"].([]any) {
			f := f.(string)
			if g.dests && f == "outputs/o.mp4" {
				if req["ticket"] != testTicket {
					http.Error(w, `{"message":"send its workload identity"}`, http.StatusUnauthorized)
					return
				}
				dests[f] = "http://" + r.Host + "/dest/o.mp4?X-Amz-Signature=5ec2e751"
			}
			urls[f] = "http://" + r.Host + "/up/" + f + "?sig=ok"
		}
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"urls": urls, "destinations": dests}})
	case r.Method == "PUT" && r.URL.Path == "/dest/o.mp4":
		g.dest, _ = io.ReadAll(r.Body)
	case r.Method == "PUT" && r.URL.Path == "/up/result.json":
		g.results++
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/up/"):
	default:
		http.Error(w, "forbidden", http.StatusForbidden)
	}
}

// TestDockerUploadGetsTheTicketFromFetch: a docker pool's fetch task asks for
// the destinations' ticket with its workload identity and keeps it outside the
// job's directory (never in the state, which ffmpeg's task reads, nor in a
// log); the upload task, with no identity, presents it and delivers to the
// destination. A refusal fails the job before its inputs, a gateway that stays
// down withholds the result (the job is retried) and runs nothing, and a job
// without destinations gets no ticket.
func TestDockerUploadGetsTheTicketFromFetch(t *testing.T) {
	defer func(w time.Duration) { patientWait = w }(patientWait)
	patientWait = time.Millisecond
	secrets := t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "nomad_mediajobs.jwt"), []byte(testIdentity+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const alloc = "5b7f3c1e-0d2a-4c8b-9e61-7a3f2b1c0d9e"
	t.Setenv("NOMAD_ALLOC_ID", alloc)
	ctx := context.Background()

	type phases struct {
		gw              *ticketGateway
		m               *mj.Manifest
		fetch, upload   *Runner
		ticket, logfile string
		log             *bytes.Buffer
	}
	setup := func(dests bool) *phases {
		gw := &ticketGateway{dests: dests}
		srv := httptest.NewServer(gw)
		t.Cleanup(srv.Close)
		alloc := t.TempDir()
		work := filepath.Join(alloc, "work")
		ticket := filepath.Join(alloc, ".mediajobs-destinations-ticket")
		log := &bytes.Buffer{}
		return &phases{gw: gw, ticket: ticket, log: log,
			m: &mj.Manifest{JobID: "j", Attempt: 1, OutputNames: []string{"o.mp4"}, UploadsURL: srv.URL + "/links",
				FFmpegCommands: []string{"-f lavfi -i testsrc=duration=1 -c:v mpeg4 {{o.mp4}}"}, DestAllowLoopback: true},
			fetch:  &Runner{WorkDir: work, TicketFile: ticket, Log: log},
			upload: &Runner{WorkDir: work, TicketFile: ticket, Log: log}}
	}

	// The phases, as the docker jobspec's tasks run them.
	p := setup(true)
	t.Setenv("NOMAD_SECRETS_DIR", secrets) // the fetch task's identity
	st := p.fetch.Fetch(ctx, p.m)
	if st.Failed || st.WorkerFault != "" {
		t.Fatalf("fetch: %+v", st)
	}
	if err := p.fetch.SaveState(st); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p.ticket)
	if b, _ := os.ReadFile(p.ticket); err != nil || string(b) != testTicket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the ticket file: %v %q", err, b)
	}
	if ask := p.gw.asked[0]; len(p.gw.asked) != 1 || ask["issue_ticket"] != true || ask["alloc"] != alloc || ask["auth"] != "Bearer "+testIdentity {
		t.Fatalf("fetch asked %v", p.gw.asked)
	}
	// ffmpeg's task reads the job's directory: no ticket there.
	filepath.Walk(p.fetch.WorkDir, func(path string, info os.FileInfo, err error) error {
		if b, _ := os.ReadFile(path); err == nil && !info.IsDir() && bytes.Contains(b, []byte(testTicket)) {
			t.Errorf("%s holds the ticket", path)
		}
		return nil
	})
	// The exec task's work, without ffmpeg.
	st = p.upload.LoadState()
	if err := os.WriteFile(filepath.Join(p.upload.WorkDir, "outputs", "o.mp4"), []byte("frames"), 0o644); err != nil {
		t.Fatal(err)
	}
	st.Done, st.Outputs = true, []mj.Output{{Name: "o.mp4"}}
	t.Setenv("NOMAD_SECRETS_DIR", "") // the upload task: no identity
	res, err := p.upload.Upload(ctx, p.m, st)
	if err != nil || !res.Succeeded || string(p.gw.dest) != "frames" {
		t.Fatalf("upload: %+v %v; the destination got %q", res, err, p.gw.dest)
	}
	if ask := p.gw.asked[1]; ask["ticket"] != testTicket || ask["auth"] != "" {
		t.Fatalf("upload asked %v", ask)
	}
	if strings.Contains(p.log.String(), testTicket) || strings.Contains(p.log.String(), testIdentity) {
		t.Fatalf("the log holds the ticket or the identity:\n%s", p.log)
	}

	// Without the ticket (a fetch task without identity), upload gets no
	// destination: the job fails, and says why.
	os.Remove(p.ticket)
	p.gw.dest = nil
	st.Failed, st.Error = false, ""
	res, err = p.upload.Upload(ctx, p.m, st)
	if err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "HTTP 401") || p.gw.dest != nil {
		t.Fatalf("upload without the ticket: %+v %v", res, err)
	}

	// A fetch task without identity: refused, the job fails before its inputs.
	p = setup(true)
	os.MkdirAll(filepath.Dir(p.ticket), 0o755)
	os.WriteFile(p.ticket, []byte("stale"), 0o600)
	st = p.fetch.Fetch(ctx, p.m)
	if !st.Failed || !strings.Contains(st.Error, "HTTP 401") || !strings.Contains(st.Error, "workload identity") || st.WorkerFault != "" {
		t.Fatalf("fetch without identity: %+v", st)
	}
	if _, err := os.Stat(p.ticket); !os.IsNotExist(err) {
		t.Fatalf("a stale ticket is left: %v", err)
	}

	// A gateway that stays down: a worker fault; exec runs nothing, upload
	// reports nothing (the dispatcher retries the attempt).
	p = setup(true)
	p.gw.status = http.StatusBadGateway
	t.Setenv("NOMAD_SECRETS_DIR", secrets)
	st = p.fetch.Fetch(ctx, p.m)
	if st.Failed || !strings.Contains(st.WorkerFault, "output destinations' ticket") {
		t.Fatalf("fetch, gateway down: %+v", st)
	}
	p.fetch.Exec(ctx, p.m, st)
	if strings.Contains(p.log.String(), "running command") {
		t.Fatalf("exec ran after a worker fault:\n%s", p.log)
	}
	p.gw.status = 0
	if res, err := p.upload.Upload(ctx, p.m, st); err == nil || res != nil || p.gw.results != 0 {
		t.Fatalf("upload after a worker fault: %+v %v", res, err)
	}

	// A job without destinations: no ticket, whatever the identity.
	p = setup(false)
	t.Setenv("NOMAD_SECRETS_DIR", "")
	st = p.fetch.Fetch(ctx, p.m)
	if _, err := os.Stat(p.ticket); st.Failed || st.WorkerFault != "" || !os.IsNotExist(err) {
		t.Fatalf("fetch, no destinations: %+v, ticket file %v", st, err)
	}
}
