package dispatcher

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// nomadDouble answers, over HTTP, the parts of Nomad's API the dispatcher's
// reconcile and event stream use, as Nomad 1.11 does, from state the test sets:
//
//   - GET /v1/jobs?prefix=&filter=: job list stubs, with ParentID, Status, Stop and
//     a JobSummary counted from the allocations;
//   - GET /v1/job/<id>, /v1/job/<id>/allocations, /v1/job/<id>/evaluations: a
//     child, its allocations and evaluations, 404 for an unknown child;
//   - DELETE /v1/job/<id>: stops the child (Stop, status dead, allocations complete);
//   - GET /v1/allocations?filter=: allocation list stubs across jobs;
//   - GET /v1/event/stream?index=: newline-delimited event batches from index on,
//     then what is published later.
//
// Filters are go-bexpr's syntax, but only what the dispatcher sends is understood:
// clauses joined by "and", each `Selector == "v"`, `!= "v"` or `matches "re"` on
// JobID, ClientStatus, Status or ParentID; anything else is a 400, as a filter
// Nomad cannot parse is. Nothing here models scheduling: allocations change only
// when the test changes them.
type nomadDouble struct {
	t   testing.TB
	srv *httptest.Server

	mu       sync.Mutex
	children map[string]*doubleChild
	events   []encodedBatch
	newEvent chan struct{} // closed and replaced on publish
	calls    map[string]int
}

type doubleChild struct {
	parent  string
	stop    bool
	submit  time.Time
	allocs  []*api.AllocationListStub
	evals   []*api.Evaluation
	created uint64
}

// doubleBatch is one line of the event stream, as Nomad writes it.
type doubleBatch struct {
	Index  uint64
	Events []api.Event
}

// encodedBatch is a batch encoded when published, so that serving the stream
// costs the process (shared with the dispatcher under test) only the write.
type encodedBatch struct {
	index uint64
	line  []byte
}

func newNomadDouble(t testing.TB) *nomadDouble {
	n := &nomadDouble{t: t, children: map[string]*doubleChild{}, newEvent: make(chan struct{}), calls: map[string]int{}}
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.srv.Close)
	return n
}

// client is a Nomad API client of the double.
func (n *nomadDouble) client() *api.Client {
	c, err := api.NewClient(&api.Config{Address: n.srv.URL})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// setChild adds or replaces a child of parent with its allocations.
func (n *nomadDouble) setChild(child string, allocs ...*api.AllocationListStub) {
	parent, _, _ := strings.Cut(child, "/dispatch-")
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.children[child]
	if c == nil {
		c = &doubleChild{parent: parent, submit: time.Now(), created: uint64(len(n.children) + 1)}
		n.children[child] = c
	}
	for _, a := range allocs {
		a.JobID = child
	}
	c.allocs = allocs
}

func (n *nomadDouble) setEvals(child string, evals ...*api.Evaluation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.children[child].evals = evals
}

// purge forgets a child, as Nomad's garbage collection does.
func (n *nomadDouble) purge(child string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.children, child)
}

func (n *nomadDouble) stopped(child string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.children[child]
	return c != nil && c.stop
}

// publish appends event batches to the stream.
func (n *nomadDouble) publish(bs ...doubleBatch) {
	enc := make([]encodedBatch, len(bs))
	for i, b := range bs {
		line, err := json.Marshal(b)
		if err != nil {
			panic(err)
		}
		enc[i] = encodedBatch{b.Index, append(line, '\n')}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, enc...)
	close(n.newEvent)
	n.newEvent = make(chan struct{})
}

// callCount is how many requests each endpoint answered since the last call.
func (n *nomadDouble) callCount() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.calls
	n.calls = map[string]int{}
	return c
}

func liveStatus(s string) bool {
	return s == api.AllocClientStatusPending || s == api.AllocClientStatusRunning || s == api.AllocClientStatusUnknown
}

// stub is the child's list stub; Nomad's job status: dead once stopped or once
// every allocation ended, running while one is live, pending before placement.
func (c *doubleChild) stub(id string) *api.JobListStub {
	sum := api.TaskGroupSummary{}
	status := "pending"
	ended := len(c.allocs) > 0
	for _, a := range c.allocs {
		switch a.ClientStatus {
		case api.AllocClientStatusPending:
			sum.Starting++
		case api.AllocClientStatusRunning:
			sum.Running++
		case api.AllocClientStatusUnknown:
			sum.Unknown++
		case api.AllocClientStatusComplete:
			sum.Complete++
		case api.AllocClientStatusFailed:
			sum.Failed++
		case api.AllocClientStatusLost:
			sum.Lost++
		}
		if liveStatus(a.ClientStatus) {
			status, ended = "running", false
		}
	}
	if len(c.allocs) == 0 {
		sum.Queued = 1
	}
	if c.stop || ended {
		status = "dead"
	}
	return &api.JobListStub{ID: id, ParentID: c.parent, Name: id, Type: "batch", Status: status, Stop: c.stop,
		SubmitTime: c.submit.UnixNano(), CreateIndex: c.created, ModifyIndex: c.created,
		JobSummary: &api.JobSummary{JobID: id, Summary: map[string]api.TaskGroupSummary{"ffmpeg": sum}}}
}

func (n *nomadDouble) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1/")
	q := r.URL.Query()
	endpoint := r.Method + " " + path
	if rest, ok := strings.CutPrefix(path, "job/"); ok {
		_, sub := splitJobPath(rest)
		endpoint = strings.TrimSuffix(r.Method+" job/<id>/"+sub, "/")
	}
	n.mu.Lock()
	n.calls[endpoint]++
	n.mu.Unlock()

	switch {
	case r.Method == "GET" && path == "event/stream":
		n.stream(w, r)
	case r.Method == "GET" && path == "jobs":
		match, err := parseFilter(q.Get("filter"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.mu.Lock()
		var out []*api.JobListStub
		for id, c := range n.children {
			if s := c.stub(id); strings.HasPrefix(id, q.Get("prefix")) && match(jobFields(s)) {
				out = append(out, s)
			}
		}
		n.mu.Unlock()
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		writeJSON(w, out)
	case r.Method == "GET" && path == "allocations":
		match, err := parseFilter(q.Get("filter"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := []*api.AllocationListStub{}
		n.mu.Lock()
		for _, c := range n.children {
			for _, a := range c.allocs {
				if match(map[string]string{"JobID": a.JobID, "ClientStatus": a.ClientStatus}) {
					out = append(out, a)
				}
			}
		}
		n.mu.Unlock()
		writeJSON(w, out)
	case strings.HasPrefix(path, "job/"):
		n.job(w, r, strings.TrimPrefix(path, "job/"))
	default:
		http.Error(w, "Invalid URL path", http.StatusNotFound)
	}
}

// splitJobPath splits "<id>[/<sub>]" of a child, whose id holds one "/".
func splitJobPath(rest string) (id, sub string) {
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) >= 2 {
		id = parts[0] + "/" + parts[1]
	}
	if len(parts) == 3 {
		sub = parts[2]
	}
	return id, sub
}

// job answers /v1/job/<id>[/allocations|/evaluations].
func (n *nomadDouble) job(w http.ResponseWriter, r *http.Request, rest string) {
	id, sub := splitJobPath(rest)
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.children[id]
	if c == nil {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	switch {
	case r.Method == "GET" && sub == "":
		s := c.stub(id)
		writeJSON(w, &api.Job{ID: &id, ParentID: &c.parent, Status: &s.Status, Stop: &c.stop})
	case r.Method == "GET" && sub == "allocations":
		writeJSON(w, append([]*api.AllocationListStub{}, c.allocs...))
	case r.Method == "GET" && sub == "evaluations":
		writeJSON(w, append([]*api.Evaluation{}, c.evals...))
	case r.Method == "DELETE" && sub == "":
		c.stop = true
		for _, a := range c.allocs {
			if liveStatus(a.ClientStatus) {
				a.ClientStatus, a.DesiredStatus = api.AllocClientStatusComplete, "stop"
			}
		}
		writeJSON(w, &api.JobDeregisterResponse{EvalID: "e-" + id})
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// stream writes the event batches from ?index= on, then each one published, as
// Nomad's /v1/event/stream does (newline-delimited JSON), until the client leaves.
func (n *nomadDouble) stream(w http.ResponseWriter, r *http.Request) {
	index, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	next := 0
	for {
		n.mu.Lock()
		batches, wake := n.events[next:], n.newEvent
		next = len(n.events)
		n.mu.Unlock()
		for _, b := range batches {
			if b.index < index {
				continue
			}
			if _, err := w.Write(b.line); err != nil {
				return
			}
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-time.After(10 * time.Second):
			if _, err := w.Write([]byte("{}\n")); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Nomad-Index", "1")
	json.NewEncoder(w).Encode(v)
}

func jobFields(s *api.JobListStub) map[string]string {
	return map[string]string{"ID": s.ID, "ParentID": s.ParentID, "Status": s.Status}
}

var clauseRE = regexp.MustCompile(`^\s*(\w+)\s+(==|!=|matches)\s+("(?:[^"\\]|\\.)*")\s*$`)

// parseFilter understands the filters described on nomadDouble.
func parseFilter(f string) (func(map[string]string) bool, error) {
	if f == "" {
		return func(map[string]string) bool { return true }, nil
	}
	var tests []func(map[string]string) bool
	for _, clause := range strings.Split(f, " and ") {
		m := clauseRE.FindStringSubmatch(clause)
		if m == nil {
			return nil, fmt.Errorf("failed to read filter expression: %q", clause)
		}
		sel, op := m[1], m[2]
		lit, err := strconv.Unquote(m[3])
		if err != nil {
			return nil, err
		}
		switch op {
		case "==":
			tests = append(tests, func(v map[string]string) bool { return v[sel] == lit })
		case "!=":
			tests = append(tests, func(v map[string]string) bool { return v[sel] != lit })
		case "matches":
			re, err := regexp.Compile(lit)
			if err != nil {
				return nil, err
			}
			tests = append(tests, func(v map[string]string) bool { return re.MatchString(v[sel]) })
		}
	}
	return func(v map[string]string) bool {
		for _, t := range tests {
			if !t(v) {
				return false
			}
		}
		return true
	}, nil
}

// allocEvent is an allocation event as Nomad sends it: the allocation (without
// its job) under Payload.Allocation, decoded by the client into a generic map.
func allocEvent(index uint64, a *api.Allocation) api.Event {
	b, err := json.Marshal(a)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return api.Event{Topic: api.TopicAllocation, Type: "AllocationUpdated", Key: a.ID,
		FilterKeys: []string{a.JobID}, Index: index, Payload: map[string]any{"Allocation": m}}
}
