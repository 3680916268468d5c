package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	mj "github.com/mediajobs/mediajobs"
)

// fetchTicket runs in a docker pool's fetch task, the one task of the
// allocation that has its Nomad workload identity when it starts: it asks the
// gateway, with that identity, for the attempt's destinations ticket and leaves
// it in r.TicketFile for the upload task, a poststop task that Nomad gives no
// identity. The ticket is no key alone: it is good only with the upload-links
// URL of the dispatch payload, which ffmpeg's task does not get (and it has no
// network), for this allocation and attempt (docs/threat-model.md). A job
// without destinations gets no ticket.
//
// A refusal fails the job (its runner cannot deliver to its destinations); a
// gateway that stays unreachable is a worker fault: nothing is reported, and
// the dispatcher runs the attempt again.
func (r *Runner) fetchTicket(ctx context.Context, m *mj.Manifest, st *State) {
	if err := os.Remove(r.TicketFile); err != nil && !os.IsNotExist(err) {
		st.WorkerFault = fmt.Sprintf("remove an old destinations ticket: %v", err)
		return
	}
	ticket, err := r.askTicket(ctx, m)
	var refused *linksRefused
	switch {
	case errors.As(err, &refused):
		st.fail(fmt.Errorf("the output destinations: %w", err))
		fmt.Fprintf(r.Log, "job failed: %s\n", st.Error)
		return
	case err != nil:
		st.WorkerFault = err.Error()
		fmt.Fprintf(r.Log, "worker fault, the job is not run here: %s\n", err)
		return
	case ticket == "":
		return
	}
	if err := os.WriteFile(r.TicketFile, []byte(ticket), 0o600); err != nil {
		st.WorkerFault = fmt.Sprintf("keep the destinations ticket: %v", err)
		return
	}
	fmt.Fprintf(r.Log, "the output destinations' ticket is kept for the upload task\n")
}

// askTicket posts the ticket request to m.UploadsURL with the task's workload
// identity; "" when the job has no destinations (or the gateway predates
// tickets, and then the upload asks as before).
func (r *Runner) askTicket(ctx context.Context, m *mj.Manifest) (string, error) {
	body := mustJSON(map[string]any{"alloc": strings.TrimSuffix(r.allocPrefix(), "/"), "files": []string{}, "destinations": true, "issue_ticket": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.UploadsURL, strings.NewReader(body))
	if err != nil {
		return "", mj.RedactError(err, m.UploadsURL)
	}
	req.Header.Set("Content-Type", "application/json")
	if token := identityToken(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.patient().Do(req)
	if err != nil {
		return "", fmt.Errorf("could not ask the gateway for the output destinations' ticket: %w", mj.RedactError(unwrapURLError(err), m.UploadsURL))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusNotFound && strings.Contains(string(b), "no such route") {
		return "", nil // a gateway without /upload-urls/: no destinations either
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("destinations ticket: HTTP %s: %s", resp.Status, lastLines(string(b), 3))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return "", &linksRefused{err}
		}
		return "", err
	}
	var out struct {
		Data struct {
			Ticket string `json:"ticket"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("destinations ticket: %w", err)
	}
	return out.Data.Ticket, nil
}

// ticket is what fetchTicket left in r.TicketFile, or "".
func (r *Runner) ticket() string {
	if r.TicketFile == "" {
		return ""
	}
	b, err := os.ReadFile(r.TicketFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
