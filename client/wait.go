package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Wait follows a job until it ends and returns it as it ended. onChange, when not
// nil, is called with the job on every change seen (status, progress), in order.
// Wait follows the job's event stream (GET /api/jobs/{id}/events) and falls back
// to polling every PollInterval where there is none (an older server, a proxy that
// buffers); a broken stream is resumed. A job that ends failed or cancelled is not
// an error: check its Status.
func (c *Client) Wait(ctx context.Context, id string, onChange func(*Job)) (*Job, error) {
	var last string
	seen := func(j *Job) {
		b, _ := json.Marshal(j)
		if string(b) != last && onChange != nil {
			onChange(j)
		}
		last = string(b)
	}
	streaming := true
	for {
		if streaming {
			j, err := c.follow(ctx, id, seen)
			switch {
			case err == nil && Terminal(j):
				return j, nil
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.Is(err, errNoStream):
				streaming = false
			case IsCode(err, "notFound") || IsCode(err, "badApiKey"):
				return nil, err
			}
			// The stream broke or ended early: read the job, then follow again.
		}
		j, err := c.Get(ctx, id)
		if err != nil {
			var e *Error
			if errors.As(err, &e) || ctx.Err() != nil {
				return nil, err
			}
		} else {
			seen(j)
			if Terminal(j) {
				return j, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(max(c.PollInterval, 100*time.Millisecond)):
		}
	}
}

// streamIdle is how long a job's event stream may stay silent (the server sends a
// comment every 15 s).
const streamIdle = 45 * time.Second

// errNoStream: the server has no event stream for jobs.
var errNoStream = errors.New("no event stream")

// follow reads the job's event stream, calling seen for each job event, until it
// ends; it returns the last job seen.
func (c *Client) follow(ctx context.Context, id string, seen func(*Job)) (*Job, error) {
	var last *Job
	err := c.stream(ctx, "/api/jobs/"+url.PathEscape(id)+"/events", "job", func(data []byte) {
		var j Job
		if json.Unmarshal(data, &j) == nil {
			last = &j
			seen(&j)
		}
	})
	return last, err
}

// stream reads the server-sent events at path, calling onData with the data of
// each event named event, until an "end" event or the stream's end. A route
// that does not exist is errNoStream; a missing object, the API's error.
func (c *Client) stream(ctx context.Context, path, event string, onData func([]byte)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	c.identify(req.Header)
	req.Header.Set("Accept", "text/event-stream")
	hc := *c.http.HTTPClient
	hc.Timeout = 0 // a stream lasts as long as what it follows; ctx bounds it, and idleness
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req = req.WithContext(ctx)
	// The server sends something at least every 15 s: silence for streamIdle is a
	// half-open connection (a lost gateway), and the stream is opened again.
	idle := time.AfterFunc(streamIdle, cancel)
	defer idle.Stop()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		// An object that does not exist says so in JSON; a route that does not
		// exist does not, or says "no such route".
		err := decode(resp, nil)
		var e *Error
		if errors.As(err, &e) && e.Code == "notFound" && !strings.Contains(e.Message, "route") {
			return err
		}
		return errNoStream
	}
	if resp.StatusCode/100 != 2 {
		return decode(resp, nil)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return errNoStream
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	name := ""
	for sc.Scan() {
		idle.Reset(streamIdle)
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:") && name == event:
			onData([]byte(strings.TrimSpace(strings.TrimPrefix(line, "data:"))))
		case line == "":
			if name == "end" {
				return nil
			}
			name = ""
		}
	}
	return sc.Err()
}
