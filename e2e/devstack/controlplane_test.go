package devstack

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// On a dev stack (loopback allowed, as make run), no job reaches the Nomad
// e2e.Agent: an input or a destination naming its API is refused at create, an
// input that redirects there fails the job with a clear message, and Nomad
// registers nothing.
func TestJobsNeverReachTheControlPlane(t *testing.T) {
	e2e.NeedStack(t)
	nomadJobs := e2e.Agent.Addr + "/v1/jobs"
	// A Nomad job, as an attacker would PUT it: it must never be registered.
	evil := `{"Job":{"ID":"mj-evil","Name":"mj-evil","Type":"batch","Datacenters":["dc1"],"TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"/bin/true"}}]}]}}`
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/to-nomad" {
			http.Redirect(w, r, nomadJobs, http.StatusTemporaryRedirect)
			return
		}
		w.Write([]byte(evil))
	}))
	defer files.Close()
	copyCmd := "-f data -i inputs/j -map 0 -c copy -f data outputs/o.json"
	body := func(input string, dests map[string]string) map[string]any {
		b := map[string]any{"input_files": map[string]string{"j": input}, "output_files": []string{"o.json"}, "ffmpeg_commands": []string{copyCmd}}
		if dests != nil {
			b["output_destinations"] = dests
		}
		return b
	}
	for name, b := range map[string]map[string]any{
		"an input naming Nomad's API":  body(nomadJobs, nil),
		"a destination at Nomad's API": body(files.URL+"/job.json", map[string]string{"o.json": nomadJobs}),
		"a destination at localhost":   body(files.URL+"/job.json", map[string]string{"o.json": strings.Replace(nomadJobs, "127.0.0.1", "localhost", 1)}),
	} {
		r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, b)
		if r.Status != 400 || !strings.Contains(string(r.Body), "control plane") {
			t.Errorf("%s: HTTP %d %s", name, r.Status, r.Body)
		}
	}
	// The gateway sees only the first host; the runner refuses the redirect's.
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, body(files.URL+"/to-nomad", nil))
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	job := e2e.WaitTerminal(t, r.Data(t)["id"].(string))
	if msg, _ := job["error_message"].(string); job["status"] != "failed" || !strings.Contains(msg, "control plane") || !strings.Contains(msg, `input "j"`) {
		t.Fatalf("a redirect to Nomad's API: %v: %v", job["status"], job["error_message"])
	}
	resp, err := http.Get(e2e.Agent.Addr + "/v1/job/mj-evil")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("Nomad has the job a user sent it: HTTP %d", resp.StatusCode)
	}
}
