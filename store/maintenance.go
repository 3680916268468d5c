package store

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefragPolicy says when a member's database is worth defragmenting. Compaction
// only marks old revisions' pages free inside the database file; the file shrinks,
// and etcd's quota (which counts the file) is relieved, only when the member is
// defragmented. A defragmentation blocks its member's reads and writes while it
// rewrites the file.
type DefragPolicy struct {
	// FreeRatio: defragment when (size - in use) / size is at least this.
	FreeRatio float64
	// MinBytes: never defragment a database smaller than this (the stall is not
	// worth it); under the NOSPACE alarm, defragment whenever this much or more can
	// be given back.
	MinBytes int64
}

// DefaultDefragPolicy is the policy of the default configuration.
var DefaultDefragPolicy = DefragPolicy{FreeRatio: 0.5, MinBytes: 64 << 20}

// ShouldDefrag decides whether a member whose database file is dbSize bytes, inUse
// of them holding data, is defragmented. Normally when it is at least p.MinBytes
// and at least p.FreeRatio of it is free. While etcd has the NOSPACE alarm every
// write is refused anyway, so the stall costs nothing and any real gain counts:
// then when p.FreeRatio of it is free or at least p.MinBytes can be given back,
// whatever its size. An unknown in-use size (0: etcd before 3.4) never qualifies.
func ShouldDefrag(dbSize, inUse int64, noSpace bool, p DefragPolicy) bool {
	if dbSize <= 0 || inUse <= 0 || inUse >= dbSize {
		return false
	}
	free := dbSize - inUse
	mostlyFree := float64(free)/float64(dbSize) >= p.FreeRatio
	if noSpace {
		return mostlyFree || free >= p.MinBytes
	}
	return dbSize >= p.MinBytes && mostlyFree
}

// MaintainOptions configure one Maintain pass.
type MaintainOptions struct {
	Policy DefragPolicy
	// Quota is the cluster's backend quota (--quota-backend-bytes). A NOSPACE alarm
	// is disarmed once its member's database is below it; 0: never disarm.
	Quota int64
	// Log receives the before/after sizes of every defragmentation and, at error
	// level, what an operator must do about an alarm. Nil: slog.Default().
	Log *slog.Logger
}

// MemberReport is one member as a Maintain pass saw it.
type MemberReport struct {
	Endpoint string
	MemberID uint64
	Leader   bool
	// Size and InUse are the database sizes at the end of the pass (after the
	// defragmentation, if there was one); SizeBefore and InUseBefore at its start.
	Size, InUse             int64
	SizeBefore, InUseBefore int64
	// Defrag is "" (not defragmented), "ok" or "error" (DefragErr says why).
	Defrag    string
	DefragErr error
	// StatusErr is why the member's status could not be read (the sizes are 0).
	StatusErr error
}

// MaintainReport is what a Maintain pass saw and did.
type MaintainReport struct {
	Members []MemberReport
	// Alarms are the alarms active at the end of the pass; Disarmed those the pass
	// disarmed. AlarmErr is why the alarms could not be listed.
	Alarms   []*pb.AlarmMember
	Disarmed []*pb.AlarmMember
	AlarmErr error
}

// AlarmActive reports whether an alarm of type t was active at the end of the pass.
func (r *MaintainReport) AlarmActive(t pb.AlarmType) bool {
	return slices.ContainsFunc(r.Alarms, func(a *pb.AlarmMember) bool { return a.Alarm == t })
}

// AlarmsActive says, for each alarm the metrics watch (NOSPACE, CORRUPT) by its
// name, whether it was active at the end of the pass.
func (r *MaintainReport) AlarmsActive() map[string]bool {
	out := make(map[string]bool, 2)
	for _, t := range []pb.AlarmType{pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT} {
		out[t.String()] = r.AlarmActive(t)
	}
	return out
}

// Timeouts of the calls of a Maintain pass. A defragmentation rewrites the whole
// database file: several seconds per GiB.
const (
	statusTimeout = 10 * time.Second
	defragTimeout = 15 * time.Minute
)

// Maintain runs one maintenance pass over every endpoint of cli: it reads each
// member's database size, defragments the members o.Policy selects one at a time
// (followers first, the leader last; never two at once, as a member is blocked
// while it is defragmented), and disarms a NOSPACE alarm once its member is back
// under o.Quota, so writes work again. List every member in the client's endpoints:
// a member only reachable behind another address is not looked at.
func Maintain(ctx context.Context, cli *clientv3.Client, o MaintainOptions) *MaintainReport {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	r := &MaintainReport{}

	actx, cancel := context.WithTimeout(ctx, statusTimeout)
	alarms, err := cli.AlarmList(actx)
	cancel()
	if err != nil {
		r.AlarmErr = err
		log.Warn("etcd maintenance: list alarms failed", "err", err)
	} else {
		r.Alarms = alarms.Alarms
	}
	noSpace := r.AlarmActive(pb.AlarmType_NOSPACE)
	if noSpace {
		log.Error("etcd: NOSPACE alarm: the database reached its quota and etcd refuses every write, so no job can be created or updated. "+
			"The leading dispatcher defragments members that have free space and disarms the alarm once they are back under etcd.quota_backend_bytes. "+
			"If that is not enough: delete what is not needed, compact (etcdctl compact <current revision>), defragment each member in turn "+
			"(etcdctl defrag --endpoints=<one member>), then etcdctl alarm disarm; or raise the quota (quota_backend_bytes, --quota-backend-bytes).",
			"alarms", alarmString(r.Alarms), "quota_bytes", o.Quota)
	}
	if r.AlarmActive(pb.AlarmType_CORRUPT) {
		log.Error("etcd: CORRUPT alarm: a member's data disagrees with the others'; etcd refuses writes. "+
			"Find the member (etcdctl alarm list, etcdctl endpoint hashkv --cluster), remove it, wipe its data and add it back, then etcdctl alarm disarm.",
			"alarms", alarmString(r.Alarms))
	}

	seen := map[uint64]bool{}
	for _, ep := range cli.Endpoints() {
		m := MemberReport{Endpoint: ep}
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			m.StatusErr = err
			log.Warn("etcd maintenance: member status failed", "endpoint", ep, "err", err)
			r.Members = append(r.Members, m)
			continue
		}
		m.MemberID = st.Header.GetMemberId()
		if seen[m.MemberID] {
			continue // two endpoints of one member
		}
		seen[m.MemberID] = true
		m.Leader = st.Leader == m.MemberID
		m.Size, m.InUse = st.DbSize, st.DbSizeInUse
		m.SizeBefore, m.InUseBefore = st.DbSize, st.DbSizeInUse
		r.Members = append(r.Members, m)
	}

	// Followers first, the leader last: defragmenting the leader stalls the cluster.
	order := make([]int, 0, len(r.Members))
	for i := range r.Members {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return boolInt(r.Members[a].Leader) - boolInt(r.Members[b].Leader)
	})
	for _, i := range order {
		m := &r.Members[i]
		if ctx.Err() != nil {
			break
		}
		if m.StatusErr != nil || !ShouldDefrag(m.Size, m.InUse, noSpace, o.Policy) {
			continue
		}
		// A lone member (embedded etcd) serves nothing while it is defragmented, and
		// the time grows with what it holds: past maxSoloDefrag it could outlast the
		// dispatcher's session and the gateways' patience. Then only NOSPACE (when
		// nothing is served anyway) justifies it.
		if len(r.Members) == 1 && !noSpace && m.InUse > maxSoloDefrag {
			log.Warn("etcd: the only member is mostly free space but too large to defragment without a long stall; run etcdctl defrag at a quiet time",
				"endpoint", m.Endpoint, "db_size_bytes", m.Size, "db_size_in_use_bytes", m.InUse)
			continue
		}
		defragment(ctx, cli, m, log)
	}

	for _, a := range slices.Clone(r.Alarms) {
		if a.Alarm != pb.AlarmType_NOSPACE || o.Quota <= 0 || ctx.Err() != nil {
			continue
		}
		i := slices.IndexFunc(r.Members, func(m MemberReport) bool { return m.StatusErr == nil && m.MemberID == a.MemberID })
		if i < 0 {
			log.Error("etcd: NOSPACE alarm of a member not among etcd.endpoints; list every member there so it can be checked and defragmented",
				"member", fmt.Sprintf("%x", a.MemberID))
			continue
		}
		m := r.Members[i]
		// Disarmed only with headroom: just under the quota, the next writes would
		// raise the alarm again at once.
		if m.Size >= o.Quota/10*9 {
			log.Error("etcd: NOSPACE alarm stays: the member's database is still within 10% of its quota; delete data, compact and defragment, or raise the quota",
				"endpoint", m.Endpoint, "db_size_bytes", m.Size, "db_size_in_use_bytes", m.InUse, "quota_bytes", o.Quota)
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, statusTimeout)
		_, err := cli.AlarmDisarm(dctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm})
		cancel()
		if err != nil {
			log.Warn("etcd maintenance: disarm NOSPACE failed", "endpoint", m.Endpoint, "err", err)
			continue
		}
		log.Info("etcd: disarmed the NOSPACE alarm; writes work again", "endpoint", m.Endpoint,
			"db_size_bytes", m.Size, "quota_bytes", o.Quota)
		r.Disarmed = append(r.Disarmed, a)
		r.Alarms = slices.DeleteFunc(r.Alarms, func(x *pb.AlarmMember) bool { return x == a })
	}
	return r
}

// maxSoloDefrag is the most data a lone member is defragmented with while it
// still serves (see Maintain).
const maxSoloDefrag = 512 << 20

// defragment defragments one member and reads its sizes again.
func defragment(ctx context.Context, cli *clientv3.Client, m *MemberReport, log *slog.Logger) {
	log.Info("etcd: defragmenting member", "endpoint", m.Endpoint, "leader", m.Leader,
		"db_size_bytes", m.Size, "db_size_in_use_bytes", m.InUse)
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, defragTimeout)
	_, err := cli.Defragment(dctx, m.Endpoint)
	cancel()
	if err != nil {
		m.Defrag, m.DefragErr = "error", err
		log.Warn("etcd: defragmentation failed", "endpoint", m.Endpoint, "err", err, "took", time.Since(start))
		return
	}
	m.Defrag = "ok"
	sctx, cancel := context.WithTimeout(ctx, statusTimeout)
	st, err := cli.Status(sctx, m.Endpoint)
	cancel()
	if err != nil {
		log.Warn("etcd maintenance: member status after defragmentation failed", "endpoint", m.Endpoint, "err", err)
		return
	}
	m.Size, m.InUse = st.DbSize, st.DbSizeInUse
	log.Info("etcd: defragmented member", "endpoint", m.Endpoint, "took", time.Since(start).Round(time.Millisecond),
		"db_size_before_bytes", m.SizeBefore, "db_size_after_bytes", m.Size, "db_size_in_use_bytes", m.InUse)
}

func alarmString(as []*pb.AlarmMember) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID)
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
