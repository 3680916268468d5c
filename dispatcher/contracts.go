package dispatcher

import (
	"context"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/store"
)

// usageSweeper deletes old usage counters (usage.go).
type usageSweeper interface {
	SweepUsage(ctx context.Context, cutoff string) (int, error)
}

// Every store interface of this package is *store.Store's, checked when it
// compiles: a renamed store method breaks the build instead of turning a
// feature off.
var (
	_ Store           = (*store.Store)(nil)
	_ settlerStore    = (*store.Store)(nil)
	_ trackerStore    = (*store.Store)(nil)
	_ reconcilerStore = (*store.Store)(nil)
	_ warmStore       = (*store.Store)(nil)
	_ observeStore    = (*store.Store)(nil)
	_ schedulerStore  = (*store.Store)(nil)
	_ janitorStore    = (*store.Store)(nil)
	_ etcdMaintainer  = (*store.Store)(nil)
	_ outboxStore     = (*store.Store)(nil)
	_ Blobs           = (*blob.Bucket)(nil)
	_ NomadJobs       = (*api.Jobs)(nil)
	_ NomadAllocs     = (*api.Allocations)(nil)
	_ NomadEvents     = (*api.EventStream)(nil)
)
