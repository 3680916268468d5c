package mediajobs

import (
	"fmt"
	"strconv"
	"strings"
)

// The names mediajobs gives things outside etcd (store/layout.go maps etcd's
// keys): the blob store's keys and Nomad's jobs. Everything that builds or
// parses one of them does it here.
//
// Blob keys:
//
//	tmp/<account>/<uuid>                      a temporary file (POST /api/tmp-file), until tmp_file_ttl
//	jobs/<id>/<attempt>/                      one attempt's files (RunScope), until output_retention:
//	  manifest-<uuid>.json                    a manifest too large for Nomad's payload
//	  <alloc>/result.json                     what the runner reports (ResultFile)
//	  <alloc>/outputs/<name>                  the outputs it published (OutputsDir)
//	  <alloc>/logs/<n>.log                    ffmpeg's log of command n (LogKey)
//
// Nomad jobs:
//
//	mediajobs-<pool>                          a pool's parameterized job (PoolJobID)
//	mediajobs-<pool>/dispatch-<id>-a<n>-…     its child for attempt n of job id (ChildPrefix, ParseChildID)
//	mediajobs-<pool>-warm                     a warm pool's runners, a service job (WarmJobID)
//
// A job that a warm runner holds records warm:<run> as its child
// (WarmChild): no Nomad job has that name.
const (
	TmpDir     = "tmp/"
	JobsDir    = "jobs/"
	ResultFile = "result.json"
	OutputsDir = "outputs/"
)

// RunScope is the blob prefix of one attempt's files.
func RunScope(id string, attempt int) string { return fmt.Sprintf("%s%s/%d/", JobsDir, id, attempt) }

// TmpKey is the blob key of temporary file id of account.
func TmpKey(account, id string) string { return TmpDir + account + "/" + id }

// ParseTmpKey splits a temporary file's blob key, tmp/<account>/<uuid>.
func ParseTmpKey(key string) (account, id string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0]+"/" != TmpDir || parts[1] == "" || !isUUID(parts[2]) {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// JobRefPrefix starts an input that names another job's output instead of a
// URL: job:<id>/<output name> (docs/references.md).
const JobRefPrefix = "job:"

// ParseJobRef splits an input value job:<id>/<output>; ok is false for
// anything else (a URL, or a malformed reference).
func ParseJobRef(v string) (id, output string, ok bool) {
	rest, found := strings.CutPrefix(v, JobRefPrefix)
	if !found {
		return "", "", false
	}
	id, output, found = strings.Cut(rest, "/")
	if !found || !isUUID(id) || !ValidOutputName(output) {
		return "", "", false
	}
	return id, output, true
}

// IsJobRef reports whether an input value is meant as a reference (job:…),
// well formed or not: such a value is never fetched as a URL.
func IsJobRef(v string) bool { return strings.HasPrefix(v, JobRefPrefix) }

// PoolJobID is the Nomad ID of a pool's parameterized job.
func PoolJobID(pool string) string { return "mediajobs-" + pool }

// WarmJobID is the Nomad ID of a pool's warm runners' service job.
func WarmJobID(pool string) string { return "mediajobs-" + pool + "-warm" }

// ChildPrefix is the dispatch id prefix: Nomad names the child
// "<parent>/dispatch-<jobid>-a<attempt>-<unix>-<rand>", so allocation events,
// which carry no job meta, can be traced back without a lookup.
func ChildPrefix(id string, attempt int) string { return fmt.Sprintf("%s-a%d", id, attempt) }

// ParseChildID extracts the mediajobs job ID and attempt from a dispatched
// child's Nomad ID; ok is false for any other Nomad job.
func ParseChildID(nomadJobID string) (id string, attempt int, ok bool) {
	_, rest, found := strings.Cut(nomadJobID, "/dispatch-")
	if !found || len(rest) < 36+3 || !strings.HasPrefix(rest[36:], "-a") {
		return "", 0, false
	}
	id = rest[:36]
	num, _, _ := strings.Cut(rest[38:], "-")
	attempt, err := strconv.Atoi(num)
	if err != nil {
		return "", 0, false
	}
	return id, attempt, true
}

// WarmChildPrefix starts the child a job records (Job.NomadJobID, the active
// set's value) while a warm runner has it: "warm:<run>". No Nomad job has it.
const WarmChildPrefix = "warm:"

// WarmChild is the child recorded for run.
func WarmChild(run string) string { return WarmChildPrefix + run }

// WarmRunOfChild is the run of a warm child, ok false for a Nomad child.
func WarmRunOfChild(child string) (string, bool) { return strings.CutPrefix(child, WarmChildPrefix) }

// isUUID reports whether s is a UUID in its canonical 36-character form.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
