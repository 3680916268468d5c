package dispatcher

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// dispatchingDouble adds to the Nomad double (nomaddouble_test.go) the two calls
// fair-share dispatch makes of a pool's parameterized job, as Nomad 1.11 answers
// them: PUT /v1/job/<parent>/dispatch (a child with no allocation yet, so pending;
// the same child again for an idempotency token seen before) and
// GET /v1/job/<parent>/summary (its children pending, running and dead).
type dispatchingDouble struct {
	*nomadDouble
	srv *httptest.Server

	mu     sync.Mutex
	tokens map[string]string
	order  []string // children in the order they were dispatched
}

func newDispatchingDouble(n *nomadDouble) *dispatchingDouble {
	d := &dispatchingDouble{nomadDouble: n, tokens: map[string]string{}}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	n.t.Cleanup(d.srv.Close)
	return d
}

func (d *dispatchingDouble) client() *api.Client {
	c, err := api.NewClient(&api.Config{Address: d.srv.URL})
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

func (d *dispatchingDouble) serve(w http.ResponseWriter, r *http.Request) {
	rest, isJob := strings.CutPrefix(r.URL.Path, "/v1/job/")
	parent, sub, _ := strings.Cut(rest, "/")
	switch {
	case isJob && r.Method == "PUT" && sub == "dispatch":
		d.dispatch(w, r, parent)
	case isJob && r.Method == "GET" && sub == "summary":
		d.summary(w, parent)
	default:
		d.nomadDouble.serve(w, r)
	}
}

func (d *dispatchingDouble) dispatch(w http.ResponseWriter, r *http.Request, parent string) {
	var req api.JobDispatchRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	token := r.URL.Query().Get("idempotency_token")
	child, seen := d.tokens[token]
	if !seen || token == "" {
		child = fmt.Sprintf("%s/dispatch-%s-%d-abcdef12", parent, req.IdPrefixTemplate, len(d.order)+1)
		d.tokens[token] = child
		d.order = append(d.order, child)
	}
	d.mu.Unlock()
	if !seen {
		d.setChild(child)
	}
	n := d.nomadDouble
	n.mu.Lock()
	n.calls["PUT job/<parent>/dispatch"]++
	n.mu.Unlock()
	eval := "e-" + child
	if seen && token != "" {
		eval = "" // Nomad returns the child it has for the token, with no evaluation
	}
	writeJSON(w, &api.JobDispatchResponse{DispatchedJobID: child, EvalID: eval})
}

func (d *dispatchingDouble) summary(w http.ResponseWriter, parent string) {
	n := d.nomadDouble
	n.mu.Lock()
	n.calls["GET job/<parent>/summary"]++
	ch := api.JobChildrenSummary{}
	for id, c := range n.children {
		if c.parent != parent {
			continue
		}
		switch c.stub(id).Status {
		case "pending":
			ch.Pending++
		case "running":
			ch.Running++
		default:
			ch.Dead++
		}
	}
	n.mu.Unlock()
	writeJSON(w, &api.JobSummary{JobID: parent, Children: &ch})
}

// dispatched is the children dispatched so far, in order.
func (d *dispatchingDouble) dispatched() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.order...)
}
