package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"
)

// balancer stands for the load balancer a deployment puts in front of its
// gateways (server.public_url): round robin, and a request whose gateway cannot
// be reached goes to the next. Bodies over maxReplay are sent to one gateway only.
type balancer struct {
	backends []*url.URL
	next     atomic.Uint32
	client   *http.Client
}

const maxReplay = 1 << 20

func newBalancer(backends []string) *balancer {
	b := &balancer{client: &http.Client{
		Transport:     &http.Transport{DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext, MaxIdleConnsPerHost: 64},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	for _, s := range backends {
		u, _ := url.Parse(s)
		b.backends = append(b.backends, u)
	}
	return b
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	replay := r.ContentLength >= 0 && r.ContentLength <= maxReplay
	if replay {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, maxReplay+1)); err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadGateway)
			return
		}
	}
	start := int(b.next.Add(1))
	var last error
	for i := range b.backends {
		be := b.backends[(start+i)%len(b.backends)]
		u := *r.URL
		u.Scheme, u.Host = be.Scheme, be.Host
		var rd io.Reader = r.Body
		if replay {
			rd = bytes.NewReader(body)
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), rd)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.Host = r.Host // links are signed for public_url's host
		out.ContentLength = r.ContentLength
		resp, err := b.client.Do(out)
		if err != nil {
			last = err
			var op *net.OpError
			if replay && errors.As(err, &op) && op.Op == "dial" {
				continue // that gateway is down: the next
			}
			break
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		// Flushed as it comes: ?wait and event streams hold the response open.
		fw := flushWriter{w}
		io.Copy(fw, resp.Body)
		return
	}
	http.Error(w, "no gateway answered: "+last.Error(), http.StatusBadGateway)
}

type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// newNomadProxy stands for what a deployment puts in front of its Nomad
// servers' HTTP APIs, since nomad.address names one: a reverse proxy that
// streams as it reads (Nomad's event stream and blocking queries hold a response
// open), whose connections go round robin to the servers (each forwards what
// needs the leader), and to the next one when a server cannot be reached. A
// request under way on a server that dies fails (502, or a cut stream), as
// behind a real balancer; the caller tries again.
// Its errors go to errs.
func newNomadProxy(servers []string, errs io.Writer) *httputil.ReverseProxy {
	var next atomic.Uint32
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	transport := &http.Transport{
		// The request names no server (see Rewrite): its connection picks one.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			start := int(next.Add(1))
			var last error
			for i := range servers {
				conn, err := dialer.DialContext(ctx, network, servers[(start+i)%len(servers)])
				if err == nil {
					return conn, nil
				}
				last = err
			}
			return nil, last
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.Host = "http", "nomad-servers", ""
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorLog:      log.New(errs, "nomad proxy: ", log.LstdFlags|log.Lmicroseconds),
	}
}
