package gateway

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
)

// uploadsRequest is what a runner asks for at the end of an attempt: where to PUT
// the files it found, under its allocation's directory.
type uploadsRequest struct {
	Alloc string   `json:"alloc"` // a Nomad allocation id, or "" outside Nomad
	Files []string `json:"files"` // "result.json" and "outputs/<name>"
	// Destinations: the runner delivers to output_destinations (destinations.go).
	Destinations bool `json:"destinations,omitempty"`
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
// max_output_files of them.
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
