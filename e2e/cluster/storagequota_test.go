package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

// A job whose outputs take its account past max_storage_bytes still succeeds
// and its webhook is delivered: the outputs are counted when its result is
// applied, and then the account's next create is refused naming the limit.
func TestOutputsOverStorageQuotaStillDelivered(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "limits {\n  max_storage_bytes = 100\n}\n")
	c.StartDispatcher("d")
	id := c.Create(c.JobBody("storage-quota", quickCmd))
	j := c.WaitStatus(id, 90*time.Second, "succeeded", "failed")
	if j["status"] != "succeeded" {
		t.Fatalf("job %v: %v", j["status"], j["error_message"])
	}
	testenv.Eventually(t, 60*time.Second, "the webhook's delivery", func() bool {
		w := c.Stored(id).Webhook
		return w != nil && w.Status == "delivered"
	})
	out := j["total_output_bytes"].(float64)
	if out <= 100 {
		t.Fatalf("the job's outputs are %v bytes; the test needs more than the limit", out)
	}
	testenv.Eventually(t, 30*time.Second, "the outputs counted", func() bool {
		u := e2e.Call(t, "GET", c.APIURL+"/api/account", c.Key, nil).Data(t)["usage"].(map[string]any)
		return u["storage_bytes"] == out
	})
	r := e2e.Call(t, "POST", c.APIURL+"/api/ffmpeg", c.Key, c.JobBody("storage-quota-2", quickCmd))
	if b := string(r.Body); r.Status != 429 || !strings.Contains(b, `"quotaExceeded"`) || !strings.Contains(b, `"limit":"max_storage_bytes"`) {
		t.Fatalf("create over max_storage_bytes: %d %s", r.Status, r.Body)
	}
}

// The account's max_input_bytes reaches the runner: a job whose input is larger
// fails, its error_message naming the limit.
func TestMaxInputBytesFailsTheJob(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "limits {\n  max_input_bytes = 1000\n}\n")
	c.StartDispatcher("d")
	id := c.Create(c.JobBody("input-bytes", quickCmd))
	j := c.WaitStatus(id, 90*time.Second, "succeeded", "failed")
	if msg, _ := j["error_message"].(string); j["status"] != "failed" || !strings.Contains(msg, "max_input_bytes (1000)") || !strings.Contains(msg, `input "in"`) {
		t.Fatalf("job %v: %v", j["status"], j["error_message"])
	}
}
