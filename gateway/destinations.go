package gateway

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
)

// checkDestinations validates a create's output_destinations (docs/api.md,
// "Output destinations"): each names a single-file entry of output_files and is
// an absolute http(s) URL, within mj.MaxDestinations and mj.MaxDestinationsBytes.
// A URL is a credential: no message quotes it. It returns what to store, nil for
// none.
func checkDestinations(req *createRequest, bad func(field, format string, args ...any)) *mj.Destinations {
	if len(req.OutputDestinations) == 0 {
		return nil
	}
	declared := map[string]bool{}
	for _, n := range req.OutputFiles {
		declared[n] = true
	}
	if n := len(req.OutputDestinations); n > mj.MaxDestinations {
		bad("output_destinations", "%d destinations; at most %d", n, mj.MaxDestinations)
	}
	size := 0
	for _, name := range sortedKeys(req.OutputDestinations) {
		field, u := "output_destinations."+name, req.OutputDestinations[name]
		size += mj.StoredLen(name) + mj.StoredLen(u)
		switch {
		case !declared[name]:
			bad(field, "%q is not an entry of output_files; a destination names one of them", mj.Clip(name, 80))
		case !mj.SingleFile(name):
			bad(field, "output %q stands for several files (a counter such as %%04d, or %%v); a destination takes one file, so give destinations to single-file outputs only", name)
		}
		if err := checkDestinationURL(u); err != nil {
			bad(field, "%v", err)
		}
	}
	if size > mj.MaxDestinationsBytes {
		bad("output_destinations", "names and URLs hold %s; at most %d bytes in all", storedBytes(size), mj.MaxDestinationsBytes)
	}
	keep := req.KeepOutputs == nil || *req.KeepOutputs
	return &mj.Destinations{URLs: req.OutputDestinations, KeepOutputs: keep}
}

// checkDestinationURL is checkURL for a URL that must not be quoted: an
// absolute http(s) URL of at most mj.MaxURLBytes that the runner can PUT to.
func checkDestinationURL(raw string) error {
	if n := mj.StoredLen(raw); n > mj.MaxURLBytes {
		return fmt.Errorf("the URL is %s; at most %d", storedBytes(n), mj.MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("not an absolute URL; give the presigned PUT URL of the object to write")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL scheme %q is not allowed; use http or https", mj.Clip(u.Scheme, 16))
	}
	return nil
}

// checkDestinationHosts is checkHosts for output_destinations under their own
// policy (public addresses unless server.destination_allow_* say otherwise;
// never the control plane); the runner checks again when it connects.
func (g *Gateway) checkDestinationHosts(ctx context.Context, j *mj.Job, guard netguard.Policy, problems map[string]string) {
	if j.Destinations == nil {
		return
	}
	for _, name := range sortedKeys(j.Destinations.URLs) {
		u := j.Destinations.URLs[name]
		if err := guard.CheckURL(ctx, g.Resolver, u); err != nil {
			problems["output_destinations."+name] = "refused: " + mj.RedactURL(err.Error(), u)
		}
	}
}

// destinationStore reads a job's output_destinations (store.Store has it).
type destinationStore interface {
	Destinations(ctx context.Context, id string) (*mj.Destinations, error)
}

// uploadDestinations is the destinations of j's outputs among files, keyed by
// "outputs/<name>", for a runner's upload links (uploadURLs); nil when j has
// none. A runner that does not say it delivers to destinations (an older one)
// is refused, so the job fails instead of ignoring them.
func (g *Gateway) uploadDestinations(ctx context.Context, j *mj.Job, req *uploadsRequest) (*mj.Destinations, error) {
	if !j.HasDestinations {
		return nil, nil
	}
	if !req.Destinations {
		return nil, mj.Errorf(mj.EValidation, "this job has output_destinations, which this worker's runner cannot deliver to: upgrade the workers")
	}
	owner, err := g.destinationsOwner(ctx, j)
	if err != nil {
		return nil, err
	}
	d, err := g.Store.Destinations(ctx, owner)
	if err != nil {
		return nil, err
	}
	if d == nil { // deleted when the job ended (store.derivedOps), since read
		return nil, mj.Errorf(mj.EConflict, "job %s has ended; the upload was refused", owner)
	}
	out := &mj.Destinations{URLs: map[string]string{}, KeepOutputs: d.KeepOutputs}
	for _, f := range req.Files {
		if name, ok := strings.CutPrefix(f, "outputs/"); ok && d.URLs[name] != "" {
			out.URLs[f] = d.URLs[name]
		}
	}
	return out, nil
}

// destinationsOwner is the job whose output_destinations j delivers: j itself,
// or, for a chunked job's stitch (docs/chunked.md), its parent, the pipeline's
// owner, whose key holds them until it ends: the URLs are never copied.
func (g *Gateway) destinationsOwner(ctx context.Context, j *mj.Job) (string, error) {
	if !j.ChunkStitch() {
		return j.ID, nil
	}
	p, err := g.Store.Pipeline(ctx, j.Pipeline.ID)
	if err != nil {
		return "", err
	}
	if p.Kind != mj.PipelineKindChunked || p.AccountID != j.AccountID || p.Owner == "" {
		return "", mj.Errorf(mj.EConflict, "job %s: pipeline %s is no chunked job's; its destinations are refused", j.ID, p.ID)
	}
	return p.Owner, nil
}
