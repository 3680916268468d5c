// Package client is a Go client of the mediajobs API (and of any service that
// speaks Very Good FFmpeg's wire protocol): create, get, list, cancel and wait for
// jobs, upload temporary files and download outputs.
//
// Every call takes a context. Requests are retried on 429, 502, 503 and 504 and
// on connection errors, with backoff that honours Retry-After; a create carries an
// Idempotency-Key, the same on every retry, so a retried create never makes two
// jobs. Errors the API answers with are *Error values.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
)

// Job is a job as the API shows it.
type Job = mj.JobView

// Client calls one mediajobs service with one API key. It is safe for concurrent use.
type Client struct {
	base      string
	key       string
	http      *retryablehttp.Client
	userAgent string
	forwarded string // X-Forwarded-For, when set (WithForwardedFor)
	// PollInterval is how often Wait polls when the events stream is unavailable.
	PollInterval time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc (its Transport and Timeout). Event
// streams need a client without an overall Timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http.HTTPClient = hc } }

// WithRetries sets how often a failed request is retried (default 4) and the
// longest wait between tries (default 30 s).
func WithRetries(n int, maxWait time.Duration) Option {
	return func(c *Client) { c.http.RetryMax, c.http.RetryWaitMax = n, maxWait }
}

// WithUserAgent names the caller in the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithForwardedFor sends X-Forwarded-For: addr on every API request, for a
// caller that serves others (mediajobs mcp -http): a gateway that lists the
// caller in server.trusted_proxies counts failed authentications per addr
// instead of per caller.
func WithForwardedFor(addr string) Option { return func(c *Client) { c.forwarded = addr } }

// identify sets the headers every API request carries: the key, the caller,
// and the client it serves.
func (c *Client) identify(h http.Header) {
	h.Set("Authorization", "Bearer "+c.key)
	h.Set("User-Agent", c.userAgent)
	if c.forwarded != "" {
		h.Set("X-Forwarded-For", c.forwarded)
	}
}

// New returns a client of the service at baseURL (such as http://127.0.0.1:8080)
// that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q is not an absolute http(s) URL", baseURL)
	}
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax = 4, 500*time.Millisecond, 30*time.Second
	rc.HTTPClient = &http.Client{}
	rc.CheckRetry = checkRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	c := &Client{base: u.String(), key: apiKey, http: rc, userAgent: "mediajobs-go-client/" + mj.Version, PollInterval: time.Second}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// checkRetry retries connection errors and the answers that say "later"; every
// other answer, 500 included, is final.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, nil
	}
	return false, nil
}

// Error is an answer of the API that is not a success: its errorCode, message and,
// for validation errors, the fields at fault.
type Error struct {
	StatusCode int               `json:"-"`
	Code       string            `json:"errorCode"`
	Message    string            `json:"message"`
	Details    map[string]string `json:"details,omitempty"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.StatusCode, e.Message)
	for _, k := range sortedKeys(e.Details) {
		s += fmt.Sprintf("; %s: %s", k, e.Details[k])
	}
	return s
}

// IsCode reports whether err is an *Error with the given errorCode
// ("validationError", "notFound", "conflict", ...).
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// do sends a request to the API and decodes the "data" of its answer into out.
func (c *Client) do(ctx context.Context, method, path string, body any, header http.Header, out any) error {
	// Without a body the request goes out with none: a nil []byte would become an
	// empty body of unknown length, sent chunked, that a server answering without
	// reading it could take for the start of the next request on the connection.
	var payload any
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		payload = raw
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, c.base+path, payload)
	if err != nil {
		return err
	}
	c.identify(req.Header)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp, out)
}

// decode reads an API answer: "data" into out, or an *Error.
func decode(resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{StatusCode: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Code == "" {
			e.Code, e.Message = "httpError", strings.TrimSpace(string(b))
			if e.Message == "" {
				e.Message = resp.Status
			}
		}
		return e
	}
	if out == nil {
		return nil
	}
	env := struct {
		Data json.RawMessage `json:"data"`
	}{}
	if err := json.Unmarshal(b, &env); err != nil || env.Data == nil {
		return fmt.Errorf("client: unexpected answer from %s: %.200s", resp.Request.URL.Path, b)
	}
	return json.Unmarshal(env.Data, out)
}

// CreateRequest is a new job: named inputs (URLs), output names, and ffmpeg
// commands that refer to them as {{name}} (or inputs/name and outputs/name).
type CreateRequest struct {
	InputFiles map[string]string `json:"input_files,omitempty"`
	// OutputFiles may be empty (nil too) for an analysis job, whose result is
	// what ffmpeg prints (the job's logs and analysis).
	OutputFiles    []string `json:"output_files"`
	FFmpegCommands []string `json:"ffmpeg_commands"`
	WebhookURL     string   `json:"webhook_url,omitempty"`
	// Machine is the pool: "cpu" (default) or a GPU pool such as "nvidia".
	Machine        string            `json:"machine,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	// OutputDestinations sends outputs to presigned PUT URLs of your own storage
	// too; KeepOutputs false keeps no service copy of them (docs/api.md,
	// "Output destinations").
	OutputDestinations map[string]string `json:"output_destinations,omitempty"`
	KeepOutputs        *bool             `json:"keep_outputs,omitempty"`
	// Parallel asks for chunked encoding (docs/chunked.md): the one command's
	// video encoded in chunks across workers, stitched and verified.
	Parallel *Parallel `json:"parallel,omitempty"`
	// IdempotencyKey is sent as Idempotency-Key; empty: a new random one per
	// Create call, kept across that call's retries.
	IdempotencyKey string `json:"-"`
}

// Parallel is a create's "parallel"; zero values take the service's
// defaults (configuration block chunked).
type Parallel struct {
	ChunkSeconds float64 `json:"chunk_seconds,omitempty"`
	MaxWorkers   int     `json:"max_workers,omitempty"`
	// Fallback runs a command that cannot be split as one job instead of
	// refusing it.
	Fallback bool `json:"fallback,omitempty"`
	// SceneCuts moves cuts to nearby scene changes (docs/chunked.md).
	SceneCuts bool `json:"scene_cuts,omitempty"`
	// Quality also encodes the source in one go and reports both encodes'
	// PSNR and SSIM against it (docs/chunked.md#quality).
	Quality bool `json:"quality,omitempty"`
}

// Create submits a job and returns it as stored (status "queued").
func (c *Client) Create(ctx context.Context, r CreateRequest) (*Job, error) {
	key := r.IdempotencyKey
	if key == "" {
		key = uuid.NewString()
	}
	if r.OutputFiles == nil {
		r.OutputFiles = []string{} // the API takes [] for no outputs, not null
	}
	var j Job
	err := c.do(ctx, http.MethodPost, "/api/ffmpeg", r, http.Header{"Idempotency-Key": {key}}, &j)
	if err != nil {
		return nil, err
	}
	return &j, nil
}

// Get returns one job.
func (c *Client) Get(ctx context.Context, id string) (*Job, error) {
	var j Job
	if err := c.do(ctx, http.MethodGet, "/api/jobs/"+url.PathEscape(id), nil, nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// WithChunks is j read again when it is a chunked job read without its
// chunks (parallel.steps), as a wait's last answer can be; j as it is when it
// has them, is no chunked job, or the read fails (its outcome is known).
func (c *Client) WithChunks(ctx context.Context, j *Job) *Job {
	if j == nil || j.Parallel == nil || j.Parallel.Mode != mj.ParallelChunked || len(j.Parallel.Steps) > 0 {
		return j
	}
	if again, err := c.Get(ctx, j.ID); err == nil {
		return again
	}
	return j
}

// Cancel cancels a queued or running job and returns it. A job that has already
// ended is returned as it ended, with an *Error "conflict" (which is also what a
// retried cancel whose first try went through gets: check the job's Status).
func (c *Client) Cancel(ctx context.Context, id string) (*Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/api/jobs/"+url.PathEscape(id)+"/cancel", nil, nil, &j)
	if IsCode(err, "conflict") {
		if ended, gerr := c.Get(ctx, id); gerr == nil {
			return ended, err
		}
	}
	if err != nil {
		return nil, err
	}
	return &j, nil
}

// ListOptions page and filter List.
type ListOptions struct {
	Status string // "" for all, else queued, running, succeeded, failed or cancelled
	Limit  int    // 1–100, default 50
	Offset int
}

// Page is one page of jobs, newest first.
type Page struct {
	Jobs    []Job
	Total   int
	HasMore bool
}

// List returns the account's jobs, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (*Page, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", o.Status)
	}
	var jobs []Job
	total, more, err := c.page(ctx, "/api/jobs", o.Limit, o.Offset, q, &jobs)
	if err != nil {
		return nil, err
	}
	return &Page{Jobs: jobs, Total: total, HasMore: more}, nil
}

// page reads one page of a list (its "data" into out, and its pagingParams).
func (c *Client) page(ctx context.Context, path string, limit, offset int, q url.Values, out any) (total int, hasMore bool, err error) {
	if q == nil {
		q = url.Values{}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if offset > 0 {
		q.Set("offset", strconv.Itoa(offset))
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return 0, false, err
	}
	c.identify(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, false, decode(resp, nil)
	}
	var body struct {
		Data   json.RawMessage `json:"data"`
		Paging struct {
			Total   int  `json:"total"`
			HasMore bool `json:"hasMore"`
		} `json:"pagingParams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, false, err
	}
	if len(body.Data) > 0 {
		if err := json.Unmarshal(body.Data, out); err != nil {
			return 0, false, err
		}
	}
	return body.Paging.Total, body.Paging.HasMore, nil
}

// Terminal reports whether a job has ended.
func Terminal(j *Job) bool { return j != nil && j.Status.Terminal() }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
