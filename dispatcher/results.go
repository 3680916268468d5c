package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
)

// results reads the results runners report (result.json) from the blob store,
// every call with a deadline (timedBlobs), and remembers which could not be
// read (readFailures). The settler owns it; a job whose result stays
// unreadable is failed by the settler (resultUnreadable).
type results struct {
	blobs timedBlobs // answered is this struct's own
	// answered: when the blob store last answered a call (unix nanoseconds).
	answered atomic.Int64
	// errs tracks results the blob store could not read (see resultUnreadable).
	errs readFailures
	log  *slog.Logger
}

func newResults(b Blobs, timeout time.Duration, log *slog.Logger) *results {
	rs := &results{log: log}
	rs.blobs = timedBlobs{b: b, timeout: timeout, answered: &rs.answered}
	return rs
}

// readResult reads the result allocation alloc of an attempt reported, and returns
// the prefix its files are under. Runners upload under their allocation's own
// prefix (jobs/<id>/<attempt>/<alloc>/), so a replacement Nomad placed for a lost
// allocation never mixes its files with the original's; a runner that knew no
// allocation id used the attempt's prefix. Nil and no error means no result (or an
// unreadable one); an error means the blob store could not answer, which says
// nothing about the result.
func (rs *results) readResult(ctx context.Context, id string, attempt int, alloc string) (*mj.Result, string, error) {
	scope := mj.RunScope(id, attempt)
	if alloc != "" {
		r, err := rs.resultAt(ctx, id, attempt, scope+alloc+"/")
		if r != nil || err != nil {
			return r, scope + alloc + "/", err
		}
	}
	r, err := rs.resultAt(ctx, id, attempt, scope)
	return r, scope, err
}

// anyResult finds a result of the attempt when the allocation that wrote it is
// no longer known (its child vanished from Nomad): the first readable one.
func (rs *results) anyResult(ctx context.Context, id string, attempt int) (*mj.Result, string, error) {
	scope := mj.RunScope(id, attempt)
	keys, err := rs.blobs.List(ctx, scope)
	if err != nil {
		return nil, "", err
	}
	sort.Strings(keys)
	var first *mj.Result
	var firstPrefix string
	for _, k := range keys {
		prefix, ok := strings.CutSuffix(k, mj.ResultFile)
		alloc := strings.TrimSuffix(strings.TrimPrefix(prefix, scope), "/")
		// The attempt's own result, or an allocation's: its directory is a Nomad
		// allocation id (the runner chose it: a longer name would not be bounded).
		if _, err := uuid.Parse(alloc); !ok || (alloc != "" && (err != nil || len(alloc) != 36)) {
			continue
		}
		r, err := rs.resultAt(ctx, id, attempt, prefix)
		if err != nil {
			return nil, "", err
		}
		if r == nil {
			continue
		}
		r.AllocID = alloc
		if r.Succeeded { // a copy that succeeded wins over one that failed
			return r, prefix, nil
		}
		if first == nil {
			first, firstPrefix = r, prefix
		}
	}
	return first, firstPrefix, nil
}

func (rs *results) resultAt(ctx context.Context, id string, attempt int, prefix string) (*mj.Result, error) {
	b, err := rs.blobs.ReadAll(ctx, prefix+mj.ResultFile)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil
	}
	if errors.Is(err, blob.ErrTooLarge) {
		return &mj.Result{JobID: id, Attempt: attempt, ErrorMessage: fmt.Sprintf("the worker's result.json was larger than %d bytes; nothing was published", blob.MaxSmall)}, nil
	}
	if err != nil {
		return nil, err
	}
	var r mj.Result
	if err := json.Unmarshal(b, &r); err != nil || r.JobID != id || r.Attempt != attempt {
		rs.log.Warn("runner result unreadable or for another job", "job", id, "err", err)
		return nil, nil
	}
	return &r, nil
}

// resultErrorLimit and resultErrorTries bound how long a result.json the blob
// store keeps refusing (an S3 403, a damaged object) leaves its job unsettled:
// once reads have failed for that long, that many times in a row, the job fails.
const (
	resultErrorLimit = 10 * time.Minute
	resultErrorTries = 3
	// resultErrorGap: failures further apart are not one persistent error.
	resultErrorGap = 5 * time.Minute
)

// readFailures remembers, per job attempt, since when its result has been
// unreadable. It is the leader's memory only: a new leader starts counting afresh.
type readFailures struct {
	mu sync.Mutex
	m  map[string]*readFailure
	// limit overrides resultErrorLimit (tests).
	limit time.Duration
}

type readFailure struct {
	first, last time.Time
	tries       int
}

// note records a failed read now and reports whether reads have failed
// persistently: for limit, at least resultErrorTries times, no gap over
// resultErrorGap, while the store answered other calls (answered, its last answer,
// is after the first failure: an outage of the whole store fails no job). A
// persistent failure is forgotten once reported.
func (r *readFailures) note(id string, attempt int, now, answered time.Time) (persistent bool, since time.Time, tries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*readFailure{}
	}
	for k, f := range r.m { // a job settled otherwise leaves its entry behind
		if now.Sub(f.last) > resultErrorGap {
			delete(r.m, k)
		}
	}
	key := fmt.Sprintf("%s/%d", id, attempt)
	f := r.m[key]
	if f == nil {
		f = &readFailure{first: now}
		r.m[key] = f
	}
	f.last, f.tries = now, f.tries+1
	limit := resultErrorLimit
	if r.limit > 0 {
		limit = r.limit
	}
	if now.Sub(f.first) < limit || f.tries < resultErrorTries || !answered.After(f.first) {
		return false, f.first, f.tries
	}
	delete(r.m, key)
	return true, f.first, f.tries
}

// resultUnreadable handles a result of child (attempt of job id) the blob store
// could not read: the job is left for the next read, unless reads have failed
// persistently (see readFailures): then it fails with the store's error.
func (s *settler) resultUnreadable(ctx context.Context, id string, attempt int, child string, err error) {
	if transientBlobError(err) {
		// A slow or overloaded store says nothing about the object: never a reason
		// to fail a job whose result may well be there.
		s.log.Warn("read runner result failed; will retry", "job", id, "nomad_job", child, "err", err)
		return
	}
	persistent, since, tries := s.res.errs.note(id, attempt, time.Now(), time.Unix(0, s.res.answered.Load()))
	if !persistent {
		s.log.Warn("read runner result failed; will retry (a job fails once its result stays unreadable while the store answers other calls)",
			"job", id, "nomad_job", child, "tries", tries, "err", err)
		return
	}
	msg := mj.Clip(fmt.Sprintf("the worker's result could not be read from the blob store (%d tries over %s): %v",
		tries, time.Since(since).Round(time.Second), err), mj.MaxDetailBytes)
	j, uerr := s.update(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != child {
			return errSkip
		}
		now := time.Now().UTC()
		j.Fail(now, msg)
		return nil
	})
	s.applied(ctx, id, child, j, uerr)
}
