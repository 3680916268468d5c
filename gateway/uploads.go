package gateway

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/workload"
)

// uploadsRequest is what a runner asks for at the end of an attempt: where to PUT
// the files it found, under its allocation's directory.
type uploadsRequest struct {
	Alloc string   `json:"alloc"` // a Nomad allocation id, or "" outside Nomad
	Files []string `json:"files"` // "result.json" and "outputs/<name>"
	// Destinations: the runner delivers to output_destinations (destinations.go).
	Destinations bool `json:"destinations,omitempty"`
	// IssueTicket asks, with the caller's workload identity, for the attempt's
	// destinations ticket (destinationsTicket) and nothing else: a docker pool's
	// fetch task does, for its upload task, which has no identity.
	IssueTicket bool `json:"issue_ticket,omitempty"`
	// Ticket stands for the workload identity when the destinations are asked for.
	Ticket string `json:"ticket,omitempty"`
}

// uploadLinkMargin is added to the job's timeout for a runner's upload links:
// they are asked for right before the uploads, which go one after another and may
// take as long as the job may run.
const uploadLinkMargin = time.Hour

// uploadURLs hands a runner one upload link per file it found: the store's own
// presigned PUTs (S3), or this gateway's signed /files/ links. The request is
// signed for one attempt (jobs/<id>/<attempt>/uploads) and answered only while that
// attempt is the job's current one; every name must be result.json or an output
// the job declared (a sequence's names are only known after the run), at most
// max_output_files of them. The outputs' destinations go only to the Nomad
// allocation running the attempt (uploaderIdentity).
func (g *Gateway) uploadURLs(c *fiber.Ctx) error {
	scope, err := url.PathUnescape(strings.TrimPrefix(c.Path(), "/upload-urls/"))
	if err != nil {
		return mj.Errorf(mj.ENotFound, "no such attempt")
	}
	q := url.Values{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { q.Add(string(k), string(v)) })
	if err := g.Signer.Verify("UPLOADS", scope, q, g.Now()); err != nil {
		return mj.Errorf(mj.EForbidden, "%v", err)
	}
	parts := strings.Split(scope, "/") // jobs, id, attempt, uploads
	if len(parts) != 4 || parts[0] != "jobs" || parts[3] != "uploads" {
		return mj.Errorf(mj.ENotFound, "no such attempt")
	}
	if _, err := strconv.Atoi(parts[2]); err != nil {
		return mj.Errorf(mj.ENotFound, "no such attempt")
	}
	if err := g.attemptOpen(c.UserContext(), scope); err != nil {
		return err
	}
	body, err := g.jsonBody(c)
	if err != nil {
		return err
	}
	var req uploadsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return mj.Errorf(mj.EValidation, "the request must be {\"alloc\": ..., \"files\": [...]}: %v", err)
	}
	if _, err := uuid.Parse(req.Alloc); req.Alloc != "" && (err != nil || len(req.Alloc) != 36) {
		return mj.Errorf(mj.EValidation, "alloc must be a Nomad allocation id")
	}
	j, err := g.job(c.UserContext(), parts[1])
	if err != nil {
		return err
	}
	if req.IssueTicket {
		return g.issueTicket(c, j, scope, q.Get("e"), req.Alloc)
	}
	if max := g.Config.Server.MaxOutputFiles + len(j.FFmpegCommands); len(req.Files) > max+1 {
		return mj.Errorf(mj.EValidation, "%d files asked for; a job may produce at most %d", len(req.Files), max)
	}
	var outs []mj.Output
	for _, f := range req.Files {
		if name, ok := strings.CutPrefix(f, "outputs/"); ok {
			outs = append(outs, mj.Output{Name: name})
		} else if n, ok := mj.LogIndex(f); ok && n <= len(j.FFmpegCommands) {
			continue // a command's log
		} else if f != "result.json" {
			return mj.Errorf(mj.EValidation, "%q is neither result.json, outputs/<name> nor logs/<command>.log", mj.Clip(f, 80))
		}
	}
	if err := mj.CheckOutputs(outs, j.OutputNames, g.Config.Server.MaxOutputFiles); err != nil {
		return mj.Errorf(mj.EValidation, "%v", err)
	}
	prefix := strings.TrimSuffix(scope, "uploads")
	if req.Alloc != "" {
		prefix += req.Alloc + "/"
	}
	dests, err := g.uploadDestinations(c.UserContext(), j, &req)
	if err != nil {
		return err
	}
	if dests != nil && len(dests.URLs) > 0 {
		if req.Ticket != "" {
			if !g.ticketValid(scope, req.Alloc, q.Get("e"), req.Ticket) {
				return mj.Errorf(mj.EForbidden, "the destinations ticket is not of allocation %q of this attempt", req.Alloc)
			}
		} else if _, err := g.uploaderIdentity(c, j); err != nil {
			return err
		}
	}
	exp := g.Now().Add(time.Duration(j.TimeoutSeconds)*time.Second + uploadLinkMargin)
	links := g.links()
	urls := make(map[string]string, len(req.Files))
	data := fiber.Map{"urls": urls}
	for _, f := range req.Files {
		if dests != nil && dests.URLs[f] != "" && !dests.KeepOutputs {
			continue // only in its destination (keep_outputs false)
		}
		urls[f] = links.URL(c.UserContext(), "PUT", prefix+f, prefix+f, exp)
	}
	if dests != nil {
		data["destinations"] = dests.URLs
	}
	return c.JSON(fiber.Map{"data": data})
}

// UploaderAuth is what the gateway needs to hand output_destinations only to
// the allocation running a job (uploaderIdentity).
type UploaderAuth struct {
	Verifier Verifier
	// Allocs reads which Nomad job an allocation belongs to; nil: only the
	// allocation the job records is admitted.
	Allocs AllocJobs
}

// AllocJobs reads an allocation's job and client status from Nomad; job "" when
// Nomad knows no such allocation.
type AllocJobs interface {
	AllocJob(ctx context.Context, id string) (job, client string, err error)
}

// dockerChild tells whether j's attempt runs as a dispatched child of a docker
// pool. Its upload task, a poststop task, gets no workload identity of its own:
// Nomad stops the allocation's identity renewal when the main task ends, and
// the task would wait a minute and start without one. The fetch task, which
// has one, gets a ticket for it instead (issueTicket).
func (g *Gateway) dockerChild(j *mj.Job) bool {
	pool := g.Config.Pool(j.Machine)
	return pool != nil && pool.Driver == "docker" && (j.Worker == nil || j.Worker.Path != mj.WorkerWarm)
}

// issueTicket answers a docker pool's fetch task: it proves with its workload
// identity (uploaderIdentity) that its allocation runs j's current attempt and
// gets the destinations ticket of that allocation and attempt, which it leaves
// outside the job's directory for the upload task. The ticket without the
// upload-links URL (ffmpeg's task has no payload, and no network) or the URL
// without the ticket (whoever reads Nomad's jobs) gets no destination. A job
// without destinations needs no ticket, nor an identity to be told so.
func (g *Gateway) issueTicket(c *fiber.Ctx, j *mj.Job, scope, exp, alloc string) error {
	if !j.HasDestinations {
		return c.JSON(fiber.Map{"data": fiber.Map{}})
	}
	claims, err := g.uploaderIdentity(c, j)
	if err != nil {
		return err
	}
	if alloc == "" || claims.AllocationID != alloc {
		return mj.Errorf(mj.EForbidden, "the identity is of allocation %s, not %q", claims.AllocationID, alloc)
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"ticket": g.destinationsTicket(scope, alloc, exp)}})
}

// destinationsTicket is the signature of method DESTINATIONS on
// jobs/<id>/<attempt>/<alloc>/destinations (scope is jobs/<id>/<attempt>/uploads),
// expiring with the upload-links URL it goes with (exp, its "e").
func (g *Gateway) destinationsTicket(scope, alloc, exp string) string {
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return ""
	}
	key := ticketKey(scope, alloc)
	u, err := url.Parse(g.Signer.URLFor("/", "DESTINATIONS", key, key, time.Unix(e, 0)))
	if err != nil {
		return ""
	}
	return u.Query().Get("sig")
}

// ticketValid checks a destinationsTicket presented with the upload-links URL
// of scope, by allocation alloc.
func (g *Gateway) ticketValid(scope, alloc, exp, ticket string) bool {
	if alloc == "" {
		return false
	}
	q := url.Values{"m": {"DESTINATIONS"}, "e": {exp}, "sig": {ticket}}
	return g.Signer.Verify("DESTINATIONS", ticketKey(scope, alloc), q, g.Now()) == nil
}

func ticketKey(scope, alloc string) string {
	return strings.TrimSuffix(scope, "uploads") + alloc + "/destinations"
}

// uploaderIdentity checks that a caller asking for j's output_destinations is
// the Nomad allocation running j's current attempt, by its workload identity
// (Authorization: Bearer, the identity "mediajobs" of the raw_exec and warm
// jobspecs' runner task, of the docker jobspec's fetch task): the upload-links
// URL travels in the dispatch payload, which whoever may read Nomad's jobs can
// see, so that URL alone is no key to the destinations. A warm runner's identity
// names the pool's warm job and must be the allocation the job was handed to. A
// dispatched child's names the pool's parameterized job (Nomad names the parent
// in a dispatched job's identities): its allocation must be the one the job
// records, or one Nomad says belongs to the child the job records.
func (g *Gateway) uploaderIdentity(c *fiber.Ctx, j *mj.Job) (*workload.Claims, error) {
	auth := g.Uploaders
	if auth == nil && g.Warm != nil {
		auth = &UploaderAuth{Verifier: g.Warm.Verifier}
	}
	if auth == nil || auth.Verifier == nil {
		// The gateway's configuration, not a passing fault: refused (4xx), so the
		// job fails once with this, rather than its attempts running out on a
		// worker fault that says nothing.
		return nil, mj.Errorf(mj.EForbidden, "job %s has output_destinations, and this gateway cannot check the worker's Nomad workload identity (it has no Nomad keys to check it with: nomad.address over https, or server.allow_insecure_warm on a network you trust; see the gateway's log)", j.ID)
	}
	token, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	if !ok || token == "" {
		if g.dockerChild(j) {
			return nil, mj.Errorf(mj.EBadAPIKey, "output_destinations go only to the Nomad allocation running the job: on a docker pool its fetch task asks for them with its workload identity (the jobspec's identity \"mediajobs\" on task fetch) and hands the upload task a ticket; this one has neither (re-register the pool's jobs, and use a worker image of this version)")
		}
		return nil, mj.Errorf(mj.EBadAPIKey, "output_destinations go only to the Nomad allocation running the job: send its workload identity, Authorization: Bearer <${NOMAD_SECRETS_DIR}/nomad_mediajobs.jwt> (the jobspec's identity \"mediajobs\"; re-register the pool's jobs if it is missing)")
	}
	ctx := c.UserContext()
	claims, err := auth.Verifier.Verify(ctx, token)
	if err != nil {
		return nil, mj.Errorf(mj.EBadAPIKey, "workload identity refused: %v", err)
	}
	if ns := g.nomadNamespace(); claims.Namespace != "" && claims.Namespace != ns {
		return nil, mj.Errorf(mj.EForbidden, "the identity is of Nomad namespace %q, not %q", claims.Namespace, ns)
	}
	w := j.Worker
	if w == nil || w.NomadJobID == "" {
		// Dispatched, but the child not recorded yet: the runner asks again.
		return nil, mj.Errorf(mj.EUnavailable, "job %s records no Nomad job yet; retry", j.ID)
	}
	notRunning := mj.Errorf(mj.EForbidden, "the identity is of Nomad job %q, allocation %s, which does not run job %s's current attempt", claims.JobID, claims.AllocationID, j.ID)
	switch {
	case w.Path == mj.WorkerWarm:
		if claims.JobID != w.NomadJobID || claims.AllocationID != w.AllocationID {
			return nil, notRunning
		}
	case claims.JobID != mj.PoolJobID(j.Machine):
		return nil, notRunning
	case claims.AllocationID == w.AllocationID:
	case auth.Allocs == nil:
		return nil, mj.Errorf(mj.EUnavailable, "job %s does not record allocation %s yet; retry", j.ID, claims.AllocationID)
	default:
		job, client, err := auth.Allocs.AllocJob(ctx, claims.AllocationID)
		if err != nil {
			return nil, mj.Errorf(mj.EUnavailable, "could not check allocation %s with Nomad: %v", claims.AllocationID, err)
		}
		if job != w.NomadJobID || (client != "running" && client != "pending") {
			return nil, notRunning
		}
	}
	return claims, nil
}
