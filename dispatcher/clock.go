package dispatcher

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The dispatcher ends attempts on durations: how long an allocation has been
// "unknown" (disconnect_grace), pending (start_timeout), or reported without a
// readable result (resultGrace). Nomad's timestamps for them come from other
// clocks (a server's ModifyTime and CreateTime, a node's FinishedAt), and a clock
// that disagrees with the dispatcher's would end attempts early. So each such
// duration counts from no earlier than when this dispatcher first saw the state,
// on its own clock: skew can only lengthen it. A new leader, which has seen
// nothing yet, waits a full grace from its first sight (docs/state_machine.md).

// sightingsKept bounds how long a first sighting is remembered: longer than any
// grace, so only entries of long-settled allocations are dropped. Most go
// sooner: pending and unknown ones when the allocation runs or ends, reported
// ones after reportedKept (only resultGrace reads them). The prune runs every
// pruneEvery, so the map holds about what the last hour saw, not a day.
const (
	sightingsKept = 24 * time.Hour
	reportedKept  = 10 * resultGrace
	pruneEvery    = 10 * time.Minute
)

// sightings remembers when this dispatcher first saw each timed state.
type sightings struct {
	mu     sync.Mutex
	at     map[string]time.Time
	pruned time.Time
}

// first is when key was first seen, now when it is seen for the first time.
func (s *sightings) first(key string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	if now.Sub(s.pruned) > pruneEvery {
		for k, t := range s.at {
			if age := now.Sub(t); age > sightingsKept || age > reportedKept && strings.HasPrefix(k, "reported/") {
				delete(s.at, k)
			}
		}
		s.pruned = now
	}
	t, ok := s.at[key]
	if !ok {
		s.at[key] = now
		return now
	}
	return t
}

func (s *sightings) forget(key string) {
	s.mu.Lock()
	delete(s.at, key)
	s.mu.Unlock()
}

// ownClock is a with its timed states' starts moved no earlier than this
// dispatcher's first sight of them (see above).
func (s *settler) ownClock(a allocState, now time.Time) allocState {
	later := func(t time.Time, kind string) time.Time {
		if seen := s.seen.first(kind+"/"+a.ID, now); seen.After(t) {
			return seen
		}
		return t
	}
	switch a.ClientStatus {
	case api.AllocClientStatusRunning, api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		// Running again (a later disconnect is timed afresh), or over: neither
		// state comes back.
		s.seen.forget("unknown/" + a.ID)
		s.seen.forget("pending/" + a.ID)
	case api.AllocClientStatusUnknown:
		a.Modified = later(a.Modified, "unknown")
	case api.AllocClientStatusPending:
		a.Created = later(a.Created, "pending")
	}
	if a.Reported {
		a.ReportedAt = later(a.ReportedAt, "reported")
	}
	return a
}

// now is the dispatcher's clock: time.Now, or the test's.
func (d *Dispatcher) now() time.Time {
	if d.clock != nil {
		return d.clock().UTC()
	}
	return time.Now().UTC()
}
