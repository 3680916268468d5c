package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

// `mediajobs mcp`: a Model Context Protocol server for agents, a client of a
// running service (docs/mcp.md). Over stdio it uses the API key of -api-key or
// MEDIAJOBS_API_KEY and may read and write local files; over streamable HTTP
// each session uses the bearer key of the request that opened it, and tools take
// URLs only (the server's disk is not the agent's).

func mcpCmd(api *apiFlags) *cobra.Command {
	h := defaultMCPHTTP("")
	cmd := &cobra.Command{
		Use:   "mcp [-http ADDR]",
		Short: "serve the Model Context Protocol (stdio, or streamable HTTP on ADDR) as a client of the service",
		Long: `Serve the Model Context Protocol so that agents can run ffmpeg jobs: tools to
run a job (local files uploaded first), check one without running it, get, list,
wait for and cancel jobs, read a job's ffmpeg logs, and probe a media file.

Over stdio (the default; an MCP client starts this command) it talks to the
service at -url / MEDIAJOBS_URL with -api-key / MEDIAJOBS_API_KEY, and tools may
read local input files and save outputs locally. With -http ADDR it serves
streamable HTTP at http://ADDR/mcp instead: each session uses the API key of the
request that opened it (Authorization: Bearer), and tools take URLs only. It
sends each client's address to the service in X-Forwarded-For: list this host
in the gateway's server.trusted_proxies (docs/mcp.md).`,
		Example: `  claude mcp add mediajobs -e MEDIAJOBS_URL=http://127.0.0.1:8080 -e MEDIAJOBS_API_KEY=mj_... -- mediajobs mcp
  mediajobs mcp -http 127.0.0.1:8090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if h.addr != "" {
				return h.serve(cmd.Context(), api, cmd.ErrOrStderr())
			}
			c, err := api.client()
			if err != nil {
				return err
			}
			return newMCPServer(c, true).Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
	cmd.Flags().StringVar(&h.addr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8090) instead of stdio")
	cmd.Flags().StringSliceVar(&h.trustedProxies, "trusted-proxy", nil, "with -http: an address or range of a reverse proxy in front of this server (TLS); its X-Forwarded-For names the client (repeatable)")
	cmd.Flags().IntVar(&h.sessions.max, "max-sessions", h.sessions.max, "with -http: sessions open at once, in all")
	cmd.Flags().IntVar(&h.sessions.perKey, "max-sessions-per-key", h.sessions.perKey, "with -http: sessions open at once per API key")
	return cmd
}

// mcpHTTP is `mediajobs mcp -http`, with the bounds that keep one caller from
// locking the others out or growing the process (docs/mcp.md, "Limits").
type mcpHTTP struct {
	addr           string
	trustedProxies []string
	sessions       mcpSessions
	// failures limits unknown keys per client address, before the service is
	// asked: the service sees this host's junk as its clients' (X-Forwarded-For).
	failures gateway.AuthFailures
	now      func() time.Time // the limits' clock
}

func defaultMCPHTTP(addr string) *mcpHTTP {
	return &mcpHTTP{addr: addr, sessions: mcpSessions{max: 1000, perKey: 16},
		failures: gateway.AuthFailures{Rate: 1, Burst: 20, GlobalRate: 100, GlobalBurst: 1000}, now: time.Now}
}

// serveMCPHTTP serves streamable HTTP at /mcp on addr with the default limits.
func serveMCPHTTP(ctx context.Context, addr string, api *apiFlags, stderr io.Writer) error {
	return defaultMCPHTTP(addr).serve(ctx, api, stderr)
}

// serve serves streamable HTTP at /mcp until ctx ends. A session's client
// carries the key of the request that opened it; requests without one are 401.
func (m *mcpHTTP) serve(ctx context.Context, api *apiFlags, stderr io.Writer) error {
	base := api.baseURL()
	var proxies []netip.Prefix
	for _, s := range m.trustedProxies {
		p, err := config.ParseProxy(s)
		if err != nil {
			return fmt.Errorf("-trusted-proxy %q is neither an address nor a range such as 10.0.0.0/8", s)
		}
		proxies = append(proxies, p)
	}
	keys := &keyVerifier{base: base, proxies: proxies, failures: &m.failures, now: m.now,
		good: map[string]time.Time{}, bad: map[string]time.Time{}}
	// The SDK asks for a server on every request, if only for the protocol
	// versions it speaks; a new session's request asks twice (the slot guard
	// gave it keeps its one server).
	versions := newMCPServer(nil, false) // never connected
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		slot, _ := r.Context().Value(sessionSlot{}).(*sessionSlot)
		if slot == nil {
			return versions
		}
		if !slot.made {
			slot.made = true
			c, err := client.New(base, bearer(r), client.WithUserAgent("mediajobs-mcp/"+mj.Version),
				client.WithForwardedFor(keys.clientAddr(r).String()))
			info := auth.TokenInfoFromContext(r.Context())
			if err != nil || info == nil {
				return nil
			}
			srv := newMCPServer(c, false)
			if m.sessions.add(info.UserID, srv) { // else over a limit: guard answered 429, bar a race
				slot.srv = srv
			}
		}
		return slot.srv
	}, &mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
	// Every request's key is checked with the service (guard), and a session is
	// bound to the key that opened it (TokenInfo.UserID): a session id is no
	// credential.
	mux := http.NewServeMux()
	mux.Handle("/mcp", keys.guard(&m.sessions, auth.RequireBearerToken(keys.verify, nil)(h)))
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	fmt.Fprintf(stderr, "MCP (streamable HTTP) at http://%s/mcp, for the service at %s\n", ln.Addr(), base)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// keyVerifier checks API keys with the service (GET /api/account), remembering
// a good one for a minute (a revoked key stops working within that minute) and
// a bad one for badKeyTTL. A key never found good takes a token of the client
// address's failure limit first, so junk costs the service a bounded number of
// checks, and locks out only its own sender.
type keyVerifier struct {
	base     string
	proxies  []netip.Prefix // -trusted-proxy
	failures *gateway.AuthFailures
	now      func() time.Time
	mu       sync.Mutex
	good     map[string]time.Time // sha256 of a key → when the service last said it is good
	bad      map[string]time.Time // sha256 of a key → until when it is taken as bad
}

const (
	goodKeyTTL = time.Minute
	badKeyTTL  = 10 * time.Second
	maxKeys    = 4096 // in each of good and bad
)

// verifiedKey marks a request whose key guard found good.
type verifiedKey struct{}

// sessionSlot holds the server of a request that opens a session.
type sessionSlot struct {
	made bool
	srv  *mcp.Server
}

func keyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// clientAddr is the address r comes from (through -trusted-proxy proxies).
func (v *keyVerifier) clientAddr(r *http.Request) netip.Addr {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return gateway.ClientAddr(ap.Addr(), r.Header.Values("X-Forwarded-For"), v.proxies)
}

// guard answers a request whose key is not good (401), whose address is out of
// failures (429), or that would open a session over its limits (429); it passes
// the others on, marked as checked for verify.
func (v *keyVerifier) guard(sessions *mcpSessions, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := bearer(r)
		if key == "" {
			next.ServeHTTP(w, r) // 401 from RequireBearerToken
			return
		}
		id := keyID(key)
		if status, retry, msg := v.check(r, key, id); status != 0 {
			if retry > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(retry))
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", "Bearer")
			}
			http.Error(w, msg, status)
			return
		}
		ctx := context.WithValue(r.Context(), verifiedKey{}, id)
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" { // a new session
			if msg := sessions.full(id); msg != "" {
				http.Error(w, msg, http.StatusTooManyRequests)
				return
			}
			slot := &sessionSlot{}
			defer func() { sessions.settle(slot.srv) }()
			ctx = context.WithValue(ctx, sessionSlot{}, slot)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// check checks key (whose sha256 is id) for r: status 0 when it is good, else
// the status, Retry-After seconds and message to answer with.
func (v *keyVerifier) check(r *http.Request, key, id string) (status, retry int, msg string) {
	now := v.now()
	v.mu.Lock()
	at, known := v.good[id]
	until, bad := v.bad[id]
	v.mu.Unlock()
	if known && now.Sub(at) < goodKeyTTL {
		return 0, 0, ""
	}
	if bad && now.Before(until) {
		return http.StatusUnauthorized, 0, "invalid token: the mediajobs API key was refused"
	}
	addr := v.clientAddr(r)
	took := false
	if !known { // a key found good before is no junk: it takes no token
		ok, wait := v.failures.Take(addr, now)
		if !ok {
			secs := max(int(math.Ceil(wait.Seconds())), 1)
			return http.StatusTooManyRequests, secs, fmt.Sprintf("too many failed authentications from this address; retry after %ds", secs)
		}
		took = true
	}
	c, err := client.New(v.base, key, client.WithUserAgent("mediajobs-mcp/"+mj.Version),
		client.WithForwardedFor(addr.String()), client.WithRetries(0, 0))
	if err != nil {
		return http.StatusInternalServerError, 0, err.Error()
	}
	_, err = c.Account(r.Context())
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case err == nil:
		if took {
			v.failures.Refund(addr)
		}
		bound(v.good, now, goodKeyTTL)
		v.good[id] = now
		return 0, 0, ""
	case client.IsCode(err, mj.EBadAPIKey):
		delete(v.good, id)
		bound(v.bad, now, 0)
		v.bad[id] = now.Add(badKeyTTL)
		return http.StatusUnauthorized, 0, "invalid token: the mediajobs API key was refused"
	case client.IsCode(err, mj.ETooManyRequests):
		return http.StatusTooManyRequests, 1, err.Error()
	default: // the service is away: not the key's fault
		if took {
			v.failures.Refund(addr)
		}
		return http.StatusBadGateway, 0, "the mediajobs service could not check the key: " + err.Error()
	}
}

// bound makes room in m (of times; ttl: how long one is worth keeping) for one
// more entry: the stale ones go, and if that is not enough, all of them (they
// are checked again).
func bound(m map[string]time.Time, now time.Time, ttl time.Duration) {
	if len(m) < maxKeys {
		return
	}
	for k, t := range m {
		if !now.Before(t.Add(ttl)) {
			delete(m, k)
		}
	}
	if len(m) >= maxKeys {
		clear(m)
	}
}

// verify is RequireBearerToken's verifier: the key guard checked for this request.
func (v *keyVerifier) verify(ctx context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
	id := keyID(key)
	if ctx.Value(verifiedKey{}) != id {
		return nil, fmt.Errorf("%w: the mediajobs API key was refused", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: id, Expiration: v.now().Add(time.Hour)}, nil
}

// bearer is the request's bearer token, read as the SDK reads it.
func bearer(r *http.Request) string {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "Bearer") {
		return ""
	}
	return f[1]
}

// mcpSessions bounds the sessions open at once, per key and in all: each holds
// a server, a client of the service and their goroutines until it ends (DELETE)
// or idles out (30 min).
type mcpSessions struct {
	max, perKey int
	mu          sync.Mutex
	open        map[*mcp.Server]sessionEntry // one server per session
}

// sessionEntry is a server's: settled once the request that made it is over,
// and the session connected in it (or failed to).
type sessionEntry struct {
	key     string
	settled bool
}

// over is why key may open no more sessions now ("" when it may), having
// dropped the servers whose session ended. The caller holds s.mu.
func (s *mcpSessions) over(key string) string {
	all, mine := 0, 0
	for srv, e := range s.open {
		live := !e.settled
		for range srv.Sessions() {
			live = true
		}
		if !live {
			delete(s.open, srv)
			continue
		}
		all++
		if e.key == key {
			mine++
		}
	}
	switch {
	case s.perKey > 0 && mine >= s.perKey:
		return fmt.Sprintf("this API key has %d MCP sessions open, the most it may (-max-sessions-per-key): end one (DELETE /mcp with its Mcp-Session-Id) or let one idle out (30 min)", mine)
	case s.max > 0 && all >= s.max:
		return fmt.Sprintf("this MCP server has %d sessions open, the most it may (-max-sessions); try again later", all)
	}
	return ""
}

// full is why key may open no more sessions now ("" when it may).
func (s *mcpSessions) full(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.over(key)
}

// add counts srv as a session of key, unless that would cross a limit.
func (s *mcpSessions) add(key string, srv *mcp.Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over(key) != "" {
		return false
	}
	if s.open == nil {
		s.open = map[*mcp.Server]sessionEntry{}
	}
	s.open[srv] = sessionEntry{key: key}
	return true
}

// settle marks srv's session as connected, or failed: from now on it counts
// while it is open.
func (s *mcpSessions) settle(srv *mcp.Server) {
	if srv == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.open[srv]; ok {
		e.settled = true
		s.open[srv] = e
	}
}

// mcpTools is the tools' state: the service's client, and whether they may touch
// the local disk (stdio) or take URLs only (HTTP).
type mcpTools struct {
	c     *client.Client
	local bool
}

const mcpInstructions = `mediajobs runs ffmpeg commands as jobs on hosted workers (CPU or NVIDIA GPU pools).
A job names its inputs (URLs, or local files that are uploaded first), lists the files its commands write,
and gives one or more ffmpeg commands without the leading "ffmpeg", referring to files as {{name}}.
Use check_job to validate a job before running it, run_job to run it and wait for the result,
probe_media to learn what a file contains (duration, streams) before writing a command.`

const commandRules = `Write each command as ffmpeg's arguments without "ffmpeg" itself, and refer to files only
as {{name}}: an input by its key in input_files, an output by its entry in output_files (or inputs/<name>, outputs/<name>).
Rules the service enforces (a refused job says which rule and what to do instead):
- every file a command writes as a result must be listed in output_files; other relative names are scratch files in the job's directory;
- no absolute paths, no "..", no URLs or protocols inside commands: put URLs in input_files;
- output names: [A-Za-z0-9][A-Za-z0-9._-]*, optionally one directory (hls/index.m3u8), one counter for sequences (frame_%03d.png);
- output_files may be [] for an analysis that writes no file (e.g. "-i {{audio}} -af loudnorm=print_format=json -f null -"): its result is the logs and the job's analysis;
- commands run in order, in the same directory, so a later command may read an earlier one's scratch or output files.
Example: input_files {"video": "https://example.com/in.mp4"}, output_files ["thumb.jpg", "small.mp4"],
ffmpeg_commands ["-i {{video}} -ss 1 -frames:v 1 {{thumb.jpg}}", "-i {{video}} -vf scale=640:-2 -c:v libx264 -c:a aac {{small.mp4}}"].`

func newMCPServer(c *client.Client, local bool) *mcp.Server {
	t := &mcpTools{c: c, local: local}
	s := mcp.NewServer(&mcp.Implementation{Name: "mediajobs", Title: "mediajobs: ffmpeg jobs", Version: mj.Version},
		&mcp.ServerOptions{Instructions: mcpInstructions})
	inputs := "input_files: a name for each input and where it is: an http(s) URL"
	if local {
		inputs += ", or a path to a local file (uploaded first as a temporary file)"
	}
	mcp.AddTool(s, &mcp.Tool{Name: "run_job", Title: "Run an ffmpeg job",
		Description: "Run ffmpeg commands on the service and wait for the result. " + inputs + ".\n" + commandRules +
			"\nReturns the job: status (succeeded/failed/cancelled, or queued/running if wait_seconds passed first), error_message, " +
			"output_files (signed download links), outputs (size, duration, streams), logs, usage. " +
			"A job the service refuses returns its message and details naming the field at fault; fix it and call again."},
		t.runJob)
	mcp.AddTool(s, &mcp.Tool{Name: "check_job", Title: "Check a job without running it",
		Description: "Run every check run_job would (commands, names, URLs, machine, account limits) without running or storing anything " +
			"(a dry run; local files are not uploaded). Returns ffmpeg's full argv for each command as the worker would run it and where, " +
			"or the same error run_job would get.\n" + commandRules, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		t.checkJob)
	mcp.AddTool(s, &mcp.Tool{Name: "get_job", Title: "Get a job", Description: "Get a job by id: its status, progress while running, outputs and their links, error_message, logs and usage.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.getJob)
	mcp.AddTool(s, &mcp.Tool{Name: "list_jobs", Title: "List jobs", Description: "List the account's jobs, newest first, optionally by status.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listJobs)
	mcp.AddTool(s, &mcp.Tool{Name: "wait_job", Title: "Wait for a job", Description: "Wait until a job ends (or wait_seconds pass) and return it.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.waitJob)
	mcp.AddTool(s, &mcp.Tool{Name: "cancel_job", Title: "Cancel a job", Description: "Cancel a queued or running job; returns it. A job that already ended is returned as it ended.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.cancelJob)
	mcp.AddTool(s, &mcp.Tool{Name: "job_logs", Title: "Read a job's ffmpeg logs",
		Description: "Read an ended job's full ffmpeg log of one command (1-based), or of every command: what ffmpeg printed, " +
			"including its error. Long logs keep their last max_bytes (default 20000).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.jobLogs)
	probeWhat := "an http(s) URL"
	if local {
		probeWhat += " or a local file path (uploaded first)"
	}
	mcp.AddTool(s, &mcp.Tool{Name: "probe_media", Title: "Probe a media file",
		Description: "Find out what a media file holds, as ffmpeg reads it: container format, duration, bitrate and each stream " +
			"(codec, resolution, frame rate, sample rate, channels). The file is " + probeWhat + ". Runs a short job that writes no file."},
		t.probe)
	return s
}

// toolError words an API error for an agent: the message, then each field at fault.
func toolError(err error) error {
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n- %s: %s", k, e.Details[k])
	}
	return errors.New(b.String())
}

type jobInput struct {
	InputFiles     map[string]string `json:"input_files,omitempty" jsonschema:"input name -> http(s) URL (or, over stdio, a local file path); refer to it in commands as {{name}}"`
	OutputFiles    []string          `json:"output_files" jsonschema:"every file the commands write as a result, e.g. [\"out.mp4\"]; [] for an analysis that writes none"`
	FFmpegCommands []string          `json:"ffmpeg_commands" jsonschema:"ffmpeg arguments without the leading ffmpeg, one string per command, run in order"`
	Machine        string            `json:"machine,omitempty" jsonschema:"the worker pool: cpu (default) or a GPU pool such as nvidia"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"the job's time limit in seconds (default: the pool's)"`
}

type runJobInput struct {
	jobInput
	WaitSeconds *int   `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the job to end before returning it as it stands (default 120, 0: do not wait)"`
	DownloadDir string `json:"download_dir,omitempty" jsonschema:"over stdio: save the outputs into this local directory once the job succeeded"`
}

type runJobOutput struct {
	Job        *client.Job       `json:"job"`
	Downloaded map[string]string `json:"downloaded,omitempty"`
}

func (t *mcpTools) request(ctx context.Context, in jobInput, upload bool) (client.CreateRequest, error) {
	req := client.CreateRequest{InputFiles: map[string]string{}, OutputFiles: in.OutputFiles, FFmpegCommands: in.FFmpegCommands,
		Machine: in.Machine, TimeoutSeconds: in.TimeoutSeconds}
	if req.OutputFiles == nil {
		req.OutputFiles = []string{}
	}
	for name, src := range in.InputFiles {
		if u, err := url.Parse(src); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			req.InputFiles[name] = src
			continue
		}
		if !t.local {
			return req, fmt.Errorf("input_files.%s: %q is not an http(s) URL (this MCP server runs over HTTP and reads no local files)", name, src)
		}
		if _, err := os.Stat(src); err != nil {
			return req, fmt.Errorf("input_files.%s: %v", name, err)
		}
		if !upload {
			req.InputFiles[name] = t.c.LocalFileURL(name)
			continue
		}
		f, err := t.c.UploadFile(ctx, src, nil)
		if err != nil {
			return req, fmt.Errorf("upload %s: %w", src, toolError(err))
		}
		req.InputFiles[name] = f.DownloadURL
	}
	return req, nil
}

func (t *mcpTools) runJob(ctx context.Context, _ *mcp.CallToolRequest, in runJobInput) (*mcp.CallToolResult, any, error) {
	if in.DownloadDir != "" && !t.local {
		return nil, nil, errors.New("download_dir: this MCP server runs over HTTP and writes no local files; download the output_files links instead")
	}
	req, err := t.request(ctx, in.jobInput, true)
	if err != nil {
		return nil, nil, err
	}
	j, err := t.c.Create(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	wait := 120
	if in.WaitSeconds != nil {
		wait = *in.WaitSeconds
	}
	if j, err = t.wait(ctx, j, wait); err != nil {
		return nil, nil, err
	}
	out := runJobOutput{Job: j}
	if in.DownloadDir != "" && j.Status == mj.StatusSucceeded {
		if err := os.MkdirAll(in.DownloadDir, 0o755); err != nil {
			return nil, out, err
		}
		out.Downloaded = map[string]string{}
		for name, link := range j.OutputFiles {
			p := filepath.Join(in.DownloadDir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, out, err
			}
			if _, err := t.c.DownloadFile(ctx, link, p, nil); err != nil {
				return nil, out, fmt.Errorf("download %s: %w", name, toolError(err))
			}
			out.Downloaded[name] = p
		}
	}
	return nil, out, nil
}

// wait follows j for at most seconds; a job still going is returned as it stands.
func (t *mcpTools) wait(ctx context.Context, j *client.Job, seconds int) (*client.Job, error) {
	if seconds <= 0 || j.Status.Terminal() {
		return j, nil
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	defer cancel()
	ended, err := t.c.Wait(wctx, j.ID, nil)
	if err == nil {
		return ended, nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		latest, gerr := t.c.Get(ctx, j.ID)
		if gerr != nil {
			return nil, toolError(gerr)
		}
		return latest, nil
	}
	return nil, toolError(err)
}

func (t *mcpTools) checkJob(ctx context.Context, _ *mcp.CallToolRequest, in jobInput) (*mcp.CallToolResult, any, error) {
	req, err := t.request(ctx, in, false)
	if err != nil {
		return nil, nil, err
	}
	d, err := t.c.DryRun(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, d, nil
}

type idInput struct {
	ID string `json:"id" jsonschema:"the job's id"`
}

func (t *mcpTools) getJob(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, any, error) {
	j, err := t.c.Get(ctx, in.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, j, nil
}

type listInput struct {
	Status string `json:"status,omitempty" jsonschema:"only jobs in this status: queued, running, succeeded, failed or cancelled"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many (1-100, default 20)"`
	Offset int    `json:"offset,omitempty" jsonschema:"skip this many of the newest"`
}

type listOutput struct {
	Jobs    []client.Job `json:"jobs"`
	Total   int          `json:"total"`
	HasMore bool         `json:"has_more"`
}

func (t *mcpTools) listJobs(ctx context.Context, _ *mcp.CallToolRequest, in listInput) (*mcp.CallToolResult, any, error) {
	if in.Limit == 0 {
		in.Limit = 20
	}
	p, err := t.c.List(ctx, client.ListOptions{Status: in.Status, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, listOutput{Jobs: p.Jobs, Total: p.Total, HasMore: p.HasMore}, nil
}

type waitInput struct {
	ID          string `json:"id" jsonschema:"the job's id"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"the longest to wait (default 120)"`
}

func (t *mcpTools) waitJob(ctx context.Context, _ *mcp.CallToolRequest, in waitInput) (*mcp.CallToolResult, any, error) {
	j, err := t.c.Get(ctx, in.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if in.WaitSeconds == 0 {
		in.WaitSeconds = 120
	}
	if j, err = t.wait(ctx, j, in.WaitSeconds); err != nil {
		return nil, nil, err
	}
	return nil, j, nil
}

func (t *mcpTools) cancelJob(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, any, error) {
	j, err := t.c.Cancel(ctx, in.ID)
	if err != nil && !(client.IsCode(err, "conflict") && j != nil) { // conflict: it had ended; here it is as it ended
		return nil, nil, toolError(err)
	}
	return nil, j, nil
}

type logsInput struct {
	ID       string `json:"id" jsonschema:"the job's id"`
	Command  int    `json:"command,omitempty" jsonschema:"only this command's log (1-based); default: every command's"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"keep the last this many bytes of each log (default 20000)"`
}

type logsOutput struct {
	Logs []commandLog `json:"logs"`
}

type commandLog struct {
	Command   int    `json:"command"`
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *mcpTools) jobLogs(ctx context.Context, _ *mcp.CallToolRequest, in logsInput) (*mcp.CallToolResult, logsOutput, error) {
	j, err := t.c.Get(ctx, in.ID)
	if err != nil {
		return nil, logsOutput{}, toolError(err)
	}
	if !j.Status.Terminal() {
		return nil, logsOutput{}, fmt.Errorf("job %s is %s: its logs come when it ends (use wait_job)", j.ID, j.Status)
	}
	if in.MaxBytes <= 0 {
		in.MaxBytes = 20000
	}
	var out logsOutput
	for n := 1; n <= len(j.FFmpegCommands); n++ {
		link, ok := j.Logs[fmt.Sprint(n)]
		if !ok || in.Command != 0 && n != in.Command {
			continue
		}
		text, truncated, err := t.fetchTail(ctx, link, in.MaxBytes)
		if err != nil {
			return nil, logsOutput{}, fmt.Errorf("log of command %d: %w", n, err)
		}
		out.Logs = append(out.Logs, commandLog{Command: n, Text: text, Truncated: truncated})
	}
	if len(out.Logs) == 0 {
		return nil, out, fmt.Errorf("job %s has no log of command %d (it has %d commands)", j.ID, in.Command, len(j.FFmpegCommands))
	}
	return nil, out, nil
}

// fetchTail downloads a log, keeping its last max bytes.
func (t *mcpTools) fetchTail(ctx context.Context, link string, max int) (string, bool, error) {
	var buf tailBuffer
	buf.max = max
	if _, err := t.c.Download(ctx, link, &buf, nil); err != nil {
		return "", false, toolError(err)
	}
	return string(buf.b), buf.cut, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	b   []byte
	max int
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b, t.cut = t.b[over:], true
	}
	return len(p), nil
}

type probeInput struct {
	File    string `json:"file" jsonschema:"the media file: an http(s) URL (or, over stdio, a local file path)"`
	Machine string `json:"machine,omitempty" jsonschema:"the worker pool to probe on (default cpu)"`
}

// MediaInfo is what ffmpeg says of an input when it opens it.
type MediaInfo struct {
	Format   string   `json:"format"`
	Duration string   `json:"duration,omitempty"`
	Bitrate  string   `json:"bitrate,omitempty"`
	Streams  []string `json:"streams"`
	// Info is ffmpeg's whole description of the input, metadata included.
	Info string `json:"info"`
}

// probe runs a job that opens the file and writes nothing ("-t 0 -f null -"), and
// reads what ffmpeg printed of the input from the job's log.
func (t *mcpTools) probe(ctx context.Context, _ *mcp.CallToolRequest, in probeInput) (*mcp.CallToolResult, *MediaInfo, error) {
	req, err := t.request(ctx, jobInput{InputFiles: map[string]string{"file": in.File}, OutputFiles: []string{},
		FFmpegCommands: []string{"-i {{file}} -t 0 -f null -"}, Machine: in.Machine}, true)
	if err != nil {
		return nil, nil, err
	}
	j, err := t.c.Create(ctx, req)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if j, err = t.wait(ctx, j, 300); err != nil {
		return nil, nil, err
	}
	if !j.Status.Terminal() {
		return nil, nil, fmt.Errorf("probe job %s is still %s after 300 s; get_job or wait_job it later", j.ID, j.Status)
	}
	link := j.Logs["1"]
	if link == "" {
		return nil, nil, fmt.Errorf("probe job %s %s without a log: %s", j.ID, j.Status, j.ErrorMessage)
	}
	text, _, err := t.fetchTail(ctx, link, 1<<20)
	if err != nil {
		return nil, nil, err
	}
	info := parseInputInfo(text)
	if info == nil {
		return nil, nil, fmt.Errorf("ffmpeg could not read the file (job %s %s): %s", j.ID, j.Status, j.ErrorMessage)
	}
	return nil, info, nil
}

var (
	inputHeadRe = regexp.MustCompile(`^Input #0, (.+), from `)
	durationRe  = regexp.MustCompile(`^\s*Duration: ([^,]+)(?:, start: [^,]+)?(?:, bitrate: (.+))?$`)
	streamRe    = regexp.MustCompile(`^\s*Stream #0:\d+`)
	levelTagRe  = regexp.MustCompile(`^\[[a-z]+\] ?`)
)

// parseInputInfo reads the "Input #0" section of an ffmpeg log (lines tagged with
// their level, -loglevel level+info); nil when there is none.
func parseInputInfo(log string) *MediaInfo {
	var m *MediaInfo
	var info bytes.Buffer
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimRight(levelTagRe.ReplaceAllString(line, ""), "\r")
		if m == nil {
			if s := inputHeadRe.FindStringSubmatch(line); s != nil {
				m = &MediaInfo{Format: s[1], Streams: []string{}}
				info.WriteString(line + "\n")
			}
			continue
		}
		if !strings.HasPrefix(line, " ") { // the section ends ("Stream mapping:", "Output #0")
			break
		}
		info.WriteString(line + "\n")
		if s := durationRe.FindStringSubmatch(line); s != nil {
			m.Duration, m.Bitrate = s[1], s[2]
		} else if streamRe.MatchString(line) {
			m.Streams = append(m.Streams, strings.TrimSpace(line))
		}
	}
	if m != nil {
		m.Info = info.String()
	}
	return m
}
