package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

func (g *Gateway) view(j *mj.Job) mj.JobView {
	exp := g.Now().Add(g.Config.Storage.TTL)
	links := g.links()
	return mj.View(j, func(key string) string { return links.Download(context.Background(), key, exp) })
}

func (g *Gateway) createJob(c *fiber.Ctx) error {
	dry, err := boolQuery(c, "dry_run")
	if err != nil {
		return err
	}
	body, err := g.jsonBody(c)
	if err != nil {
		return err
	}
	req, err := decodeCreate(body)
	if err != nil {
		return err
	}
	j, err := newJob(req, g.Config, account(c), g.Now())
	if err != nil {
		return err
	}
	if err := decideParallel(req, g.Config, j); err != nil {
		return err
	}
	if err := g.checkHosts(c.UserContext(), j, dry); err != nil {
		return err
	}
	if dry {
		if err := g.resolveRefs(c.UserContext(), j); err != nil {
			return err
		}
		return g.dryRun(c, j)
	}
	var idem *store.Idempotency
	if key := c.Get("Idempotency-Key"); key != "" {
		if len(key) > 255 {
			return mj.Errorf(mj.EValidation, "Idempotency-Key: at most 255 characters")
		}
		// The decoded request, re-encoded: key order and spacing do not matter.
		canon, _ := json.Marshal(req)
		sum := sha256.Sum256(canon)
		idem = &store.Idempotency{Key: key, Fingerprint: hex.EncodeToString(sum[:])}
	}
	// A retry of a create that was stored gets its job, whatever happened since
	// to the temporary files it named (they may have expired).
	prior, err := g.idempotentJob(c, idem)
	if err != nil {
		return err
	}
	id := j.ID
	if prior != nil {
		j = prior
	} else {
		if err := g.resolveRefs(c.UserContext(), j); err != nil { // other jobs' outputs (references.go)
			return err
		}
		if err := g.claimInputs(c.UserContext(), j); err != nil { // temporary files' first use
			return err
		}
		if j.ChunkedParent() {
			j, err = g.createChunked(c, j, idem)
		} else {
			j, err = g.createWithin(c, j, idem)
		}
		if err != nil {
			return err
		}
	}
	g.jobs.put(j, false)
	g.jobChanged(j) // its own reader sees it in the queue at once
	if j.ID == id {
		metrics.JobsCreated.WithLabelValues(j.Machine).Inc()
	}
	if c.Query("wait") == "true" {
		// Bounded by wait_limit, which stays below clients' read timeouts.
		ctx, cancel := context.WithTimeout(context.Background(), g.Config.Server.WaitLimitD)
		defer cancel()
		if latest, err := g.Store.WaitJob(ctx, j.ID, func(j *mj.Job) bool { return j.Status.Terminal() }); err == nil {
			j = latest
			g.jobs.put(j, false)
		}
	}
	return g.sendJob(c, j)
}

// idempotentJobs finds the job an earlier create with the same Idempotency-Key
// stored; *store.Store has it.
type idempotentJobs interface {
	IdempotentJob(ctx context.Context, account string, idem *store.Idempotency) (*mj.Job, error)
}

// idempotentJob is the job a create with idem stored before, nil if none.
func (g *Gateway) idempotentJob(c *fiber.Ctx, idem *store.Idempotency) (*mj.Job, error) {
	if idem == nil {
		return nil, nil
	}
	return g.Store.IdempotentJob(c.UserContext(), account(c), idem)
}

// checkHosts refuses input and webhook URLs whose hosts are, or resolve to, private,
// link-local or other internal addresses (loopback only where allow_loopback is set;
// internal ranges and names listed in allow_cidrs and allow_hosts). A dry run
// fetches nothing, and takes a URL whose path is under /files/dry-run/ as a local
// file the client would upload first (the CLI and the dashboard name them so).
func (g *Gateway) checkHosts(ctx context.Context, j *mj.Job, dry bool) error {
	problems := map[string]string{}
	guard := g.Config.Guard()
	for name, u := range j.InputFiles {
		if mj.IsJobRef(u) || g.ownFile(u) || dry && dryRunLocalFile(u) {
			continue // a temporary file's download_url: fetched from this service
		}
		if err := guard.CheckURL(ctx, g.Resolver, u); err != nil {
			problems["input_files."+name] = "refused: " + err.Error()
		}
	}
	if j.WebhookURL != "" {
		if err := guard.CheckURL(ctx, g.Resolver, j.WebhookURL); err != nil {
			problems["webhook_url"] = "refused: " + err.Error()
		}
	}
	g.checkDestinationHosts(ctx, j, g.Config.DestinationGuard(), problems)
	if len(problems) > 0 {
		return validationError(problems)
	}
	return nil
}

// ownFile reports whether u is a valid signed download link of this service, such
// as a temporary file's download_url. The runner fetches it from the service like
// it uploads outputs, so public_url may be a private address (a service inside a
// company network) without refusing the service's own files.
func (g *Gateway) ownFile(u string) bool {
	if g.Signer.Base == "" || !strings.HasPrefix(u, g.Signer.Base+"/files/") {
		return false
	}
	pu, err := url.Parse(u)
	base, err2 := url.Parse(g.Signer.Base)
	if err != nil || err2 != nil {
		return false
	}
	key := strings.TrimPrefix(pu.Path, base.Path+"/files/")
	return g.Signer.Verify("GET", key, pu.Query(), g.Now()) == nil
}

// jsonBody reads a JSON request body of at most max_body_bytes. Bodies are
// streamed (uploads share the server), so the limit is applied while reading.
func (g *Gateway) jsonBody(c *fiber.Ctx) ([]byte, error) {
	max := g.Config.Server.MaxBodyBytes
	tooLarge := mj.Errorf(mj.EPayloadTooLarge, "request body is over %d bytes", max)
	if cl := c.Request().Header.ContentLength(); cl > max {
		return nil, tooLarge
	}
	if !c.Request().IsBodyStream() {
		if len(c.Body()) > max {
			return nil, tooLarge
		}
		return c.Body(), nil
	}
	b, err := io.ReadAll(io.LimitReader(requestBody(c), int64(max)+1))
	if err != nil {
		return nil, mj.Errorf(mj.EValidation, "could not read the request body: %v", err)
	}
	if len(b) > max {
		return nil, tooLarge
	}
	return b, nil
}

// ownJob returns the caller's job; another account's job is "not found".
func (g *Gateway) ownJob(c *fiber.Ctx) (*mj.Job, error) {
	// fiber's Params aliases a reused buffer: job clones it before the cache keeps it.
	j, err := g.job(c.UserContext(), c.Params("id"))
	if err != nil {
		return nil, err
	}
	if j.AccountID != account(c) {
		return nil, mj.ErrNotFound
	}
	return j, nil
}

// getJob answers a job that is not terminal from its answer kept in the cache
// (encodedView), written at its first GET, with its standing written in; any
// other from its view.
func (g *Gateway) getJob(c *fiber.Ctx) error {
	// fiber's Params aliases a reused buffer: the cache clones it if it reads etcd.
	j, ev, err := g.jobView(c.UserContext(), c.Params("id"))
	if err == nil && j.AccountID != account(c) {
		err = mj.ErrNotFound // another account's job
	}
	if err != nil {
		return notFound(err, c.Params("id"))
	}
	if ev == nil && viewCacheable(j) && g.jobs.live.Load() {
		if ev = g.encodeView(j); ev != nil {
			g.jobs.putView(ev) // if j is still the job cached
		}
	}
	if ev != nil {
		var buf [192]byte
		d, ok := g.appendStanding(c.UserContext(), buf[:0], j)
		if !ok {
			d = append(d[:0], j.StatusDetail...)
		}
		sendEncoded(c, ev, d)
		return nil
	}
	v := g.view(j)
	if d, ok := g.standingOf(c.UserContext(), j); ok {
		v.StatusDetail = d
	}
	g.parallelSteps(c.UserContext(), &v)
	return sendView(c, &v)
}

func notFound(err error, id string) error {
	if mj.ErrorCode(err) == mj.ENotFound {
		return mj.Errorf(mj.ENotFound, "job %s not found", id)
	}
	return err
}

func (g *Gateway) cancelJob(c *fiber.Ctx) error {
	if _, err := g.ownJob(c); err != nil {
		return notFound(err, c.Params("id"))
	}
	j, err := g.Store.UpdateJob(c.UserContext(), c.Params("id"), func(j *mj.Job) error {
		if j.Status.Terminal() {
			if j.ChunkedParent() && j.Status == mj.StatusCancelled {
				return errEnded // by its pipeline's stop, which may be this client's own
			}
			return mj.Errorf(mj.EConflict, "job is already %s", j.Status)
		}
		now := g.Now().UTC()
		j.Cancel(now, "cancelled by the client")
		if j.ChunkedParent() {
			return nil // its pipeline's jobs are metered, each as it ends
		}
		// What the running attempt held until now counts (docs/usage.md); the
		// store meters it with this write.
		gpus := 0
		if p := g.Config.Pool(j.Machine); p != nil {
			gpus = p.GPUs()
		}
		j.Usage = mj.CancelledUsage(j, now, gpus)
		return nil
	})
	if err == errEnded {
		// A chunked job its pipeline ended cancelled: the cancel is done.
		if j, err = g.Store.Job(c.UserContext(), c.Params("id")); err != nil {
			return notFound(err, c.Params("id"))
		}
		g.jobs.put(j, false)
		return g.sendJob(c, j)
	}
	if err != nil {
		return err
	}
	g.jobs.put(j, false)
	g.jobChanged(j)
	metrics.Finished(j)
	if j.ChunkedParent() {
		// Its own cancel first, so that the leader ending its pipeline
		// meanwhile cannot end it otherwise (a 409 to a cancel that won);
		// then its pipeline's stop and jobs, best effort: the leader stops
		// the pipeline of a cancelled chunked job (dispatcher/chunked.go).
		g.stopChunked(c.UserContext(), j)
	}
	return g.sendJob(c, j)
}

// maxListOffset bounds ?offset=: the store reads offset+limit index keys to
// serve a page.
const maxListOffset = 10_000

// pageQuery reads a list's ?limit= (1–100, default def) and ?offset=
// (at most maxListOffset; hint says how else to narrow the list).
func pageQuery(c *fiber.Ctx, def int, hint string) (limit, offset int, err error) {
	if limit, err = intQuery(c, "limit", def, 1, 100); err != nil {
		return 0, 0, err
	}
	if offset, err = intQuery(c, "offset", 0, 0, math.MaxInt); err != nil {
		return 0, 0, err
	}
	if offset > maxListOffset {
		e := mj.Errorf(mj.EValidation, "offset must be at most %d%s", maxListOffset, hint)
		e.Details = map[string]string{"offset": "too large"}
		return 0, 0, e
	}
	return limit, offset, nil
}

// sendPage answers a list: its page of views, and where it stands in total.
func sendPage[V any](c *fiber.Ctx, views []V, limit, offset, total int) error {
	return c.JSON(fiber.Map{
		"data": views,
		"pagingParams": fiber.Map{
			"limit": limit, "offset": offset, "total": total,
			"hasMore": offset+len(views) < total,
		},
	})
}

func (g *Gateway) listJobs(c *fiber.Ctx) error {
	limit, offset, err := pageQuery(c, 50, "; use a smaller offset, or narrow the list with ?status=")
	if err != nil {
		return err
	}
	status := mj.Status(c.Query("status"))
	if status != "" && !status.Valid() {
		e := mj.Errorf(mj.EValidation, "status must be one of queued, running, succeeded, failed, cancelled")
		e.Details = map[string]string{"status": "unknown status"}
		return e
	}
	page, err := g.Store.ListJobs(c.UserContext(), account(c), store.ListOptions{Limit: limit, Offset: offset, Status: status})
	if err != nil {
		return err
	}
	views := make([]mj.JobView, len(page.Jobs))
	for i, j := range page.Jobs {
		views[i] = g.view(j)
	}
	return sendPage(c, views, limit, offset, page.Total)
}

func intQuery(c *fiber.Ctx, name string, def, min, max int) (int, error) {
	s := c.Query(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		e := mj.Errorf(mj.EValidation, "%s must be an integer from %d to %d", name, min, max)
		e.Details = map[string]string{name: "out of range"}
		return 0, e
	}
	return n, nil
}
