package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/valyala/fasthttp"
)

// A kept answer (encodedView) with any status_detail written in is byte for
// byte what encoding/json writes for the job's view with that detail; terminal
// jobs and jobs with progress keep none.
func TestEncodedViewJSON(t *testing.T) {
	g := &Gateway{Config: config.Default(), Now: time.Now}
	app := fiber.New()
	details := []string{"", "waiting: 3 of your jobs are ahead in pool cpu", `needs "escaping" <&> é ` + "\u2028", strings.Repeat("long ", 80)}
	kept := 0
	for _, j := range viewTestJobs() {
		if !viewCacheable(j) {
			if !j.Status.Terminal() && j.Progress == nil {
				t.Errorf("job %s (%s) keeps no answer", j.ID, j.Status)
			}
			continue
		}
		if j.Status.Terminal() || j.Progress != nil {
			t.Fatalf("job %s (%s, progress %v) would keep its answer", j.ID, j.Status, j.Progress)
		}
		kept++
		ev := g.encodeView(j)
		if ev == nil || ev.job != j {
			t.Fatalf("job %s: no answer written", j.ID)
		}
		for _, d := range details {
			v := g.view(j)
			v.StatusDetail = d
			want, err := json.Marshal(fiber.Map{"data": v})
			if err != nil {
				t.Fatal(err)
			}
			c := app.AcquireCtx(&fasthttp.RequestCtx{})
			sendEncoded(c, ev, []byte(d))
			if got := c.Response().Body(); string(got) != string(want) {
				t.Errorf("job %s (%s), detail %q:\ngot  %s\nwant %s", j.ID, j.Status, d, got, want)
			}
			if ct := string(c.Response().Header.ContentType()); ct != fiber.MIMEApplicationJSON {
				t.Errorf("content type %q", ct)
			}
			app.ReleaseCtx(c)
		}
	}
	if kept < 3 {
		t.Fatalf("only %d jobs keep an answer: the test covers too little", kept)
	}
}

// The cache keeps a job's answer only beside the job it was written from, and
// counts it in its size; a change of the job, or its eviction, drops it.
func TestJobCacheKeepsAnswers(t *testing.T) {
	g := &Gateway{Config: config.Default(), Now: time.Now}
	c := &g.jobs
	c.reset(true)
	j := &mj.Job{ID: "j1", AccountID: "a", Status: mj.StatusQueued, Revision: 5}
	c.put(j, false)
	before := c.bytes
	// An answer written from a copy of the job is not kept.
	cp := *j
	c.putView(g.encodeView(&cp))
	if _, v := c.getView("j1"); v != nil || c.bytes != before {
		t.Fatal("an answer written from another copy of the job was kept")
	}
	ev := g.encodeView(j)
	c.putView(ev)
	if got, v := c.getView("j1"); got != j || v != ev {
		t.Fatalf("getView = %p, %v; want the job and its answer", got, v)
	}
	if c.bytes != before+ev.size() {
		t.Fatalf("cache bytes %d, want %d", c.bytes, before+ev.size())
	}
	// A newer revision replaces the job and drops its answer.
	j2 := &mj.Job{ID: "j1", AccountID: "a", Status: mj.StatusRunning, Revision: 6}
	c.put(j2, true)
	if got, v := c.getView("j1"); got != j2 || v != nil {
		t.Fatalf("after a change: %p, %v", got, v)
	}
	if c.bytes != jobBytes(j2) {
		t.Fatalf("cache bytes %d after a change, want %d", c.bytes, jobBytes(j2))
	}
	c.putView(ev) // written from the old revision
	if _, v := c.getView("j1"); v != nil {
		t.Fatal("an answer of an older revision was kept")
	}
	c.putView(g.encodeView(j2))
	c.drop("j1")
	if c.bytes != 0 || len(c.views) != 0 {
		t.Fatalf("after the drop: %d bytes, %d answers", c.bytes, len(c.views))
	}
}

// GET of a job not terminal keeps its answer: the next GET answers the same
// bytes from it, with its standing current; a change made elsewhere replaces
// it; another account still gets 404.
func TestGetJobKeptAnswer(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	testenv.Eventually(t, 5*time.Second, "the job watch", h.gw.jobs.live.Load)
	get := func(id, acct string) (int, string) {
		t.Helper()
		req := httptest.NewRequest("GET", "/api/jobs/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+h.keys[acct])
		resp, err := h.app.Test(req, 10000)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	create := func() string {
		_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
		return body["data"].(map[string]any)["id"].(string)
	}
	first := create()
	_, a := get(first, "alice")
	if _, v := h.gw.jobs.getView(first); v == nil {
		t.Fatal("GET kept no answer for a queued job")
	}
	if _, b := get(first, "alice"); b != a {
		t.Fatalf("the kept answer differs:\n%s\n%s", b, a)
	}
	// What the view would answer, standing included.
	j := h.gw.jobs.get(first)
	v := h.gw.view(j)
	v.StatusDetail, _ = h.gw.standingOf(context.Background(), j)
	want, _ := json.Marshal(fiber.Map{"data": v})
	if a != string(want) {
		t.Fatalf("GET answered\n%s\nthe view is\n%s", a, want)
	}
	if !strings.Contains(a, `"status_detail":"waiting: your next job in pool cpu`) {
		t.Fatalf("no standing in %s", a)
	}
	if code, _ := get(first, "bob"); code != 404 {
		t.Fatalf("another account's GET: %d", code)
	}
	// The standing is written at each GET: a second job is behind the first.
	second := create()
	get(second, "alice")
	testenv.Eventually(t, 5*time.Second, "the second job's standing", func() bool {
		_, b := get(second, "alice")
		return strings.Contains(b, `"status_detail":"waiting: 1 of your jobs is ahead in pool cpu"`)
	})
	// A change made elsewhere (the dispatcher) drops the kept answer.
	h.store.UpdateJob(context.Background(), first, func(j *mj.Job) error {
		j.Metadata = map[string]string{"k": "changed"}
		return nil
	})
	testenv.Eventually(t, 5*time.Second, "GET to show the change", func() bool {
		_, b := get(first, "alice")
		return strings.Contains(b, `"metadata":{"k":"changed"}`)
	})
	// A terminal job's answer (signed links, with an expiry from now) is not kept.
	h.store.UpdateJob(context.Background(), first, func(j *mj.Job) error {
		j.Status = mj.StatusFailed
		return nil
	})
	testenv.Eventually(t, 5*time.Second, "GET to show the job failed", func() bool {
		_, b := get(first, "alice")
		return strings.Contains(b, `"status":"failed"`)
	})
	if _, v := h.gw.jobs.getView(first); v != nil {
		t.Fatal("a failed job's answer was kept")
	}
}
