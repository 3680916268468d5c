package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
)

// deliver uploads output o (open as fh): to its destination first when it has
// one (output_destinations, docs/api.md), then to the service unless the job
// keeps no copy (the gateway gave no link for it).
func (r *Runner) deliver(ctx context.Context, m *mj.Manifest, client *http.Client, fh *os.File, o *mj.Output, link func(string) string, dests map[string]string) error {
	path := "outputs/" + o.Name
	if u := dests[path]; u != "" {
		d, err := toDestination(ctx, m, fh, o.Size, u)
		if err != nil {
			return err
		}
		d.Kept = link(path) != ""
		o.Destination = d
		fmt.Fprintf(r.Log, "sent output %s to its destination %s: HTTP %d, sha256 %s\n", o.Name, d.URL, d.HTTPStatus, d.SHA256)
		if !d.Kept {
			return nil
		}
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	err := put(ctx, client, link(path), fh, o.Size)
	if err != nil && storeTrouble(err) {
		return &storeError{err}
	}
	return err
}

// toDestination PUTs the size bytes of fh to the user's URL through the SSRF
// guard and the server's allowlists, following no redirect. A refusal names
// the destination (never its query, which holds the signature), its status and
// its message.
func toDestination(ctx context.Context, m *mj.Manifest, fh *os.File, size int64, rawURL string) (*mj.Delivery, error) {
	shown := mj.ShownURL(rawURL)
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return nil, err
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	client, err := destinationClient(m)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rawURL, fh)
	if err != nil {
		return nil, fmt.Errorf("its destination %s: %s", shown, mj.RedactURL(err.Error(), rawURL))
	}
	req.ContentLength = size
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the upload to its destination %s failed: %s", shown, mj.RedactURL(unwrapURLError(err).Error(), rawURL))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := mj.RedactURL(refusal(b), rawURL)
		return nil, fmt.Errorf("its destination %s refused the upload: HTTP %s: %s", shown, resp.Status, mj.Clip(msg, maxRefusalBytes))
	}
	return &mj.Delivery{URL: shown, Status: "uploaded", HTTPStatus: resp.StatusCode, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// maxRefusalBytes bounds a destination's message quoted in error_message.
const maxRefusalBytes = 300

// refusal is what a refusing destination said: an S3-style XML error's code
// and message (not the rest, where AWS quotes the request and the signature it
// got), else the body's text.
func refusal(body []byte) string {
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if xml.Unmarshal(body, &e) == nil && (e.Code != "" || e.Message != "") {
		return strings.TrimSpace(strings.Trim(e.Code+": "+e.Message, ": "))
	}
	s := strings.Join(strings.Fields(string(body)), " ")
	if s == "" {
		return "(no message)"
	}
	return s
}

// inputGuard is the policy for the job's input URLs: the server's allow lists
// (allow_loopback, allow_cidrs, allow_hosts), never the control plane.
func inputGuard(m *mj.Manifest) (netguard.Policy, error) {
	p, err := netguard.NewPolicy(m.AllowLoopback, m.AllowCIDRs, m.AllowHosts)
	if err != nil {
		return netguard.Policy{}, fmt.Errorf("manifest: %w", err)
	}
	p.Control = netguard.NewControlPlane(m.ControlPlane)
	return p, nil
}

// destinationGuard is the policy for output destinations: a PUT of a body the
// user controls, so public addresses only unless the destination_allow_*
// lists say otherwise (the inputs' lists never apply), and never the control
// plane. A manifest from a dispatcher that predates these lists gets the
// strict policy.
func destinationGuard(m *mj.Manifest) (netguard.Policy, error) {
	p, err := netguard.NewPolicy(m.DestAllowLoopback, m.DestAllowCIDRs, m.DestAllowHosts)
	if err != nil {
		return netguard.Policy{}, fmt.Errorf("manifest: %w", err)
	}
	p.Control = netguard.NewControlPlane(m.ControlPlane)
	return p, nil
}

// destinationClient retries what fails on the way (connections, 5xx) but
// never a refusal, and follows no redirect: a redirect could lead the upload
// past the guard's check of the destination's host.
func destinationClient(m *mj.Manifest) (*http.Client, error) {
	guard, err := destinationGuard(m)
	if err != nil {
		return nil, err
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: guard.Transport(), CheckRedirect: noRedirect}
	rc.CheckRetry = retryUnlessRefused
	rc.RetryMax = 3
	rc.RetryWaitMin, rc.RetryWaitMax = 500*time.Millisecond, 5*time.Second
	rc.Logger = nil
	c := rc.StandardClient()
	c.CheckRedirect = noRedirect
	return c, nil
}
