package gateway

import (
	"context"
	"errors"
	"slices"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
)

// resolveRefs checks the inputs of new job j that name another job's output
// (job:<id>/<output>, docs/references.md) and records what each means: the
// output's blob key when its job has succeeded (InputKeys), or the job to await
// (Awaits). A job of another account is "no such job", as an id that does not
// exist. One that failed or was cancelled, or does not list the output, is
// refused: the job could never run.
func (g *Gateway) resolveRefs(ctx context.Context, j *mj.Job) error {
	problems := map[string]string{}
	for _, name := range sortedKeys(j.InputFiles) {
		id, output, ok := mj.ParseJobRef(j.InputFiles[name])
		if !ok {
			continue
		}
		field := "input_files." + name
		dep, err := g.job(ctx, id)
		if mj.ErrorCode(err) == mj.ENotFound || err == nil && dep.AccountID != j.AccountID {
			problems[field] = "no job " + id + " in this account"
			continue
		}
		if err != nil {
			return err
		}
		if msg := mj.IntermediateRef(dep, output); msg != "" {
			problems[field] = msg
			continue
		}
		key, wait, never := mj.ResolveRef(dep, output)
		switch {
		case never != "":
			problems[field] = never
		case wait:
			if !slices.Contains(j.Awaits, id) {
				j.Awaits = append(j.Awaits, id)
			}
		default:
			// Kept for output_retention: an expired output is refused now,
			// not when a worker fails to fetch it.
			if _, _, err := g.Blobs.Stat(ctx, key); errors.Is(err, blob.ErrNotFound) {
				problems[field] = "job " + id + "'s output " + output + " has expired (storage.output_retention)"
				continue
			} else if err != nil {
				return err
			}
			if j.InputKeys == nil {
				j.InputKeys = map[string]string{}
			}
			j.InputKeys[name] = key
		}
	}
	if len(problems) > 0 {
		return validationError(problems)
	}
	if len(j.Awaits) > 0 {
		j.StatusDetail = j.AwaitingDetail()
	}
	return nil
}
