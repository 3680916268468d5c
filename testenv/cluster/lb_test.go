package cluster

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// The proxy in front of the Nomad servers passes each event of a stream on as
// it comes (the stream never ends by itself), and connects to a server that
// is up when the others cannot be reached.
func TestNomadProxyStreamsAndFailsOver(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path+"\n")
		w.(http.Flusher).Flush()
		<-release // an event stream stays open
	}))
	defer up.Close()
	defer close(release)
	down, err := testenv.FreeAddrs(2) // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	var errs strings.Builder
	proxy := httptest.NewServer(newNomadProxy([]string{down[0], strings.TrimPrefix(up.URL, "http://"), down[1]}, &errs))
	defer proxy.Close()

	// A stream holds its connection to a server, so each request dials: the
	// proxy starts each dial at the next server, down ones included.
	for i := 0; i < 3; i++ {
		resp, err := http.Get(proxy.URL + "/v1/event/stream")
		if err != nil {
			t.Fatal(err)
		}
		line := make(chan string, 1)
		go func() {
			l, _ := bufio.NewReader(resp.Body).ReadString('\n')
			line <- l
		}()
		select {
		case l := <-line:
			if resp.StatusCode != 200 || l != "/v1/event/stream\n" {
				t.Fatalf("request %d: %s %q (proxy errors: %s)", i, resp.Status, l, errs.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d: the first event did not come through while the stream is open", i)
		}
		resp.Body.Close()
	}
}
