package store

import (
	"context"

	mj "github.com/mediajobs/mediajobs"
)

// CheckCreate runs CreateJobWithin's checks of the account's limits against what
// it holds now, and writes nothing: a dry run (docs/api.md). j is not changed.
func (s *Store) CheckCreate(ctx context.Context, j *mj.Job, defaults Limits) error {
	u, err := retryTransient(ctx, func(bool) (usageRead, error) { return s.readUsage(ctx, j.AccountID) })
	if err != nil {
		return err
	}
	c := *j
	beside, err := s.besideBytes(&c, nil)
	if err != nil {
		return err
	}
	if _, err := encodeRecord(&c, beside); err != nil { // sets the record's size
		return err
	}
	return checkCreate(u.overrides.Apply(defaults), u, &c)
}
