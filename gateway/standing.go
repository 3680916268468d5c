package gateway

import (
	"context"
	"fmt"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// queueStanding is what the store tells of a queued job's place; *store.Store has it.
type queueStanding interface {
	QueueStanding(ctx context.Context, j *mj.Job) (store.Standing, error)
}

// withStanding returns j with its status_detail saying where it stands in its
// account's part of its pool's queue, for a queued job not yet handed to Nomad;
// any other job as it is. It is computed when a client reads the job (a
// transaction of count-only reads), never stored: a queued job's record is not
// rewritten while others move ahead of it (docs/scheduling.md). A failed read
// leaves the stored detail.
func (g *Gateway) withStanding(ctx context.Context, j *mj.Job) *mj.Job {
	if j.Status != mj.StatusQueued || j.NomadJobID != "" {
		return j
	}
	st, err := g.Store.QueueStanding(ctx, j)
	if err != nil {
		return j
	}
	limit := g.Config.Limits.MaxRunningPerAccount
	if st.Schedule != nil && st.Schedule.MaxRunningPerPool != nil {
		limit = *st.Schedule.MaxRunningPerPool
	}
	c := *j // the cache's copy stays as stored
	c.StatusDetail = standingDetail(j.Machine, st.Ahead, st.InFlight, limit, j.StatusDetail)
	return &c
}

// standingDetail words a queued job's standing (docs/scheduling.md).
func standingDetail(pool string, ahead, inFlight, limit int, stored string) string {
	var b strings.Builder
	switch {
	case ahead > store.StandingAheadMax:
		fmt.Fprintf(&b, "waiting: more than %d of your jobs are ahead in pool %s", store.StandingAheadMax, pool)
	case ahead == 0:
		fmt.Fprintf(&b, "waiting: your next job in pool %s; dispatched when the pool has room and it is your account's turn", pool)
	case ahead == 1:
		fmt.Fprintf(&b, "waiting: 1 of your jobs is ahead in pool %s", pool)
	default:
		fmt.Fprintf(&b, "waiting: %d of your jobs are ahead in pool %s", ahead, pool)
	}
	if limit > 0 && inFlight >= limit {
		fmt.Fprintf(&b, "; account limit %d running reached (%d running)", limit, inFlight)
	}
	if stored != "" {
		b.WriteString("; ")
		b.WriteString(stored)
	}
	return b.String()
}
