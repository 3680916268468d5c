package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// rawConn is one keep-alive HTTP/1.1 connection to the gateway whose bytes the
// test writes itself, so that it controls the framing of each request.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A bound on a broken exchange, not a timing assertion: every answer here is
	// immediate.
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

func (c *rawConn) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, raw); err != nil {
		c.t.Fatalf("writing the request: %v", err)
	}
}

// answer reads the next response on the connection: its status, its body, and
// whether the server said it will close the connection.
func (c *rawConn) answer(what string) (int, string, bool) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("%s: reading the answer: %v", what, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s: reading the answer's body: %v", what, err)
	}
	if len(b) > 400 {
		b = append(b[:400:400], "..."...)
	}
	return resp.StatusCode, string(b), resp.Close
}

func chunked(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(p), p)
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

const healthz = "GET /healthz HTTP/1.1\r\nHost: gw.test\r\n\r\n"

// checkHealthz reads the answer to healthz: the second request on a connection
// must get its own answer, not one to leftovers of the first request's body.
func (c *rawConn) checkHealthz(after string) {
	c.t.Helper()
	status, body, _ := c.answer("GET /healthz after " + after)
	if status != 200 || !strings.Contains(body, `"status":"ok"`) {
		c.t.Fatalf("GET /healthz after %s: HTTP %d %s", after, status, body)
	}
}

// A bodyless POST sent with an empty chunked body (as Go's net/http sends a
// request whose Body is set but whose length is unknown) is read to its end: the
// chunk terminator is not taken for the next request on the connection.
func TestRequestBodiesAreReadBeforeTheNextRequest(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	auth := "Authorization: Bearer " + h.keys["alice"] + "\r\n"
	tmpFile := func(c *rawConn, what string) {
		t.Helper()
		status, body, closing := c.answer(what)
		var m struct {
			Data struct {
				UploadURL string `json:"upload_url"`
			} `json:"data"`
		}
		if status != 200 || json.Unmarshal([]byte(body), &m) != nil || m.Data.UploadURL == "" {
			t.Fatalf("%s: HTTP %d %s", what, status, body)
		}
		if closing {
			t.Fatalf("%s: the server closes the connection after a request it answered", what)
		}
	}

	t.Run("empty chunked POST, then another request", func(t *testing.T) {
		c := dialRaw(t, base)
		c.send("POST /api/tmp-file HTTP/1.1\r\nHost: gw.test\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" + chunked())
		tmpFile(c, "empty chunked POST /api/tmp-file")
		c.send(healthz)
		c.checkHealthz("an empty chunked POST")
	})

	t.Run("empty chunked POST pipelined with another request", func(t *testing.T) {
		c := dialRaw(t, base)
		c.send("POST /api/tmp-file HTTP/1.1\r\nHost: gw.test\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" + chunked() + healthz)
		tmpFile(c, "pipelined empty chunked POST /api/tmp-file")
		c.checkHealthz("a pipelined empty chunked POST")
	})

	t.Run("unwanted chunked body", func(t *testing.T) {
		c := dialRaw(t, base)
		c.send("POST /api/tmp-file HTTP/1.1\r\nHost: gw.test\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" +
			chunked("GET /healthz HTTP/1.1\r\n\r\n", strings.Repeat("x", 3000)))
		tmpFile(c, "POST /api/tmp-file with a chunked body")
		c.send(healthz)
		c.checkHealthz("a POST with a chunked body")
	})

	// fasthttp reads the first 8 KiB of a streamed body with the headers; the rest
	// of an unread body is left on the connection.
	t.Run("unwanted body past the first 8 KiB", func(t *testing.T) {
		c := dialRaw(t, base)
		body := strings.Repeat("y", 20000)
		c.send(fmt.Sprintf("POST /api/tmp-file HTTP/1.1\r\nHost: gw.test\r\n%sContent-Length: %d\r\n\r\n%s", auth, len(body), body))
		tmpFile(c, "POST /api/tmp-file with a 20000-byte body")
		c.send(healthz)
		c.checkHealthz("a POST with a 20000-byte body")
	})

	t.Run("refused request with an empty chunked body", func(t *testing.T) {
		c := dialRaw(t, base)
		c.send("POST /api/jobs/nosuchjob/cancel HTTP/1.1\r\nHost: gw.test\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" + chunked())
		if status, body, closing := c.answer("cancel of a missing job"); status != 404 || !strings.Contains(body, `"notFound"`) || closing {
			t.Fatalf("cancel of a missing job: HTTP %d %s (closing: %v)", status, body, closing)
		}
		c.send(healthz)
		c.checkHealthz("a refused empty chunked POST")
	})
}

// A chunked PUT to an upload link is stored whole, and the connection serves the
// next request: the download of what was just uploaded. A refused chunked PUT (a
// bad signature) is read to its end too, and the connection stays usable.
func TestChunkedUploadKeepsTheConnectionInStep(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
	d, _ := body["data"].(map[string]any)
	if d == nil {
		t.Fatalf("tmp-file: %v", body)
	}
	up, _ := url.Parse(d["upload_url"].(string))
	down, _ := url.Parse(d["download_url"].(string))
	base := h.serve()

	c := dialRaw(t, base)
	c.send("PUT " + up.RequestURI() + " HTTP/1.1\r\nHost: gw.test\r\nContent-Type: video/mp4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked("hel", "lo"))
	if status, body, closing := c.answer("chunked PUT"); status != 200 || !strings.Contains(body, `"size":5`) || closing {
		t.Fatalf("chunked PUT: HTTP %d %s (closing: %v)", status, body, closing)
	}
	c.send("GET " + down.RequestURI() + " HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	if status, body, _ := c.answer("download after a chunked PUT"); status != 200 || body != "hello" {
		t.Fatalf("download after a chunked PUT: HTTP %d %q", status, body)
	}

	bad := strings.Replace(up.RequestURI(), "sig=", "sig=x", 1)
	c.send("PUT " + bad + " HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked("GET /healthz HTTP/1.1\r\n\r\n", "zz"))
	if status, body, closing := c.answer("chunked PUT with a bad signature"); status != 403 || !strings.Contains(body, `"forbidden"`) || closing {
		t.Fatalf("chunked PUT with a bad signature: HTTP %d %s (closing: %v)", status, body, closing)
	}
	c.send(healthz)
	c.checkHealthz("a refused chunked PUT")
	c.send("GET " + down.RequestURI() + " HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	if status, body, _ := c.answer("download after a refused PUT"); status != 200 || body != "hello" {
		t.Fatalf("download after a refused PUT: HTTP %d %q", status, body)
	}
}
