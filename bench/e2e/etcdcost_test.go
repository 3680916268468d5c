package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	etcdTrace = flag.Bool("e2e.etcdtrace", false, "BenchmarkEtcdCost: log every etcd write of the measured jobs")
	etcdTail  = flag.Duration("e2e.etcdtail", 5*time.Second, "BenchmarkEtcdCost: how long to keep watching after the delivery, to log (not count) later writes")
)

// etcdCostJobs are the two jobs of BenchmarkEtcdCost: a short encode, and one whose
// ffmpeg reads its input at native rate (-re) for 60 s, so its runner reports
// progress throughout (every 2 s; the gateway stores at most one every 3 s).
var etcdCostJobs = []struct {
	name, command string
}{
	{"short", "-f lavfi -i testsrc=duration=1:size=160x120:rate=10 -c:v libx264 -preset ultrafast {{out.mp4}}"},
	{"60s", "-re -f lavfi -i testsrc=size=160x120:rate=10 -t 60 -c:v libx264 -preset ultrafast {{out.mp4}}"},
}

// KeyKinds are the first segments of the store's keys (after its prefix) that
// BenchmarkEtcdCost reports apart; any other key counts as "other".
var keyKinds = []string{"jobs", "progress", "idx", "sidx", "queue", "active", "outbox", "done", "dispatcher", "other"}

func keyKind(rel string) string {
	first, _, _ := strings.Cut(rel, "/")
	for _, k := range keyKinds {
		if first == k {
			return k
		}
	}
	return "other"
}

// etcdWrite is one watch event: a put or a delete of one key at one revision.
type etcdWrite struct {
	rev   int64
	del   bool
	key   string // without the store prefix
	value []byte
	bytes int // len(key) + len(value), the key with the prefix
}

// etcdCost is what one job wrote to etcd, from just before its create until the
// write that recorded its webhook as delivered.
type etcdCost struct {
	id          string
	start, end  int64 // revisions: before the create, the delivered write
	header      int64 // etcd's header revision read just after the delivered write was seen
	took        time.Duration
	writes      []etcdWrite // in the window (start, end]
	after       []etcdWrite // in the tail after end (logged, not counted)
	quiet       bool        // no write for quietFor before the start
	recordBytes int         // the job key and its last record before the end (key + value)
}

// quietFor is how long etcd's revision must stand still before a measurement
// starts, so the window holds this job's writes only.
const quietFor = 3 * time.Second

// waitQuiet waits until etcd's revision has not moved for quietFor (at most a
// minute) and returns it.
func waitQuiet(ctx context.Context, cli *clientv3.Client) (int64, bool, error) {
	deadline := time.Now().Add(time.Minute)
	var rev int64
	since := time.Now()
	for {
		resp, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly())
		if err != nil {
			return 0, false, err
		}
		if resp.Header.Revision != rev {
			rev, since = resp.Header.Revision, time.Now()
		}
		if time.Since(since) >= quietFor {
			return rev, true, nil
		}
		if time.Now().After(deadline) {
			return rev, false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// measureEtcdCost creates one job whose webhook points at recv and follows every
// write under the store's prefix until the job's record says the webhook was
// delivered.
func (e *env) measureEtcdCost(ctx context.Context, recv *hookReceiver, name, command string) (*etcdCost, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cli := e.st.Client()
	start, quiet, err := waitQuiet(ctx, cli)
	if err != nil {
		return nil, err
	}
	c := &etcdCost{start: start, quiet: quiet}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	watch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start+1))

	body, _ := json.Marshal(map[string]any{
		"output_files":    []string{"out.mp4"},
		"ffmpeg_commands": []string{command},
		"webhook_url":     recv.url + "/hook/etcd/" + name,
	})
	t0 := time.Now()
	if c.id, err = e.create(ctx, body); err != nil {
		return nil, err
	}
	jobKey := "jobs/" + c.id
	var tail <-chan time.Time // runs once the delivered write was seen
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-watch:
		case <-tail:
			return c, nil
		}
		if !ok {
			return nil, fmt.Errorf("job %s: the etcd watch ended before the webhook was delivered: %w", c.id, ctx.Err())
		}
		if err := resp.Err(); err != nil {
			return nil, fmt.Errorf("job %s: etcd watch: %w", c.id, err)
		}
		for _, ev := range resp.Events {
			w := etcdWrite{rev: ev.Kv.ModRevision, del: ev.Type == clientv3.EventTypeDelete,
				key: strings.TrimPrefix(string(ev.Kv.Key), prefix), value: ev.Kv.Value,
				bytes: len(ev.Kv.Key) + len(ev.Kv.Value)}
			if c.end != 0 && w.rev > c.end {
				c.after = append(c.after, w)
				continue
			}
			c.writes = append(c.writes, w)
			if w.key != jobKey || w.del {
				continue
			}
			var j mj.Job
			if err := json.Unmarshal(w.value, &j); err != nil {
				return nil, fmt.Errorf("job %s: decode record at revision %d: %w", c.id, w.rev, err)
			}
			if !j.Status.Terminal() {
				c.recordBytes = w.bytes // the record as progress would have rewritten it
			}
			if j.Webhook != nil && j.Webhook.Status == "failed" {
				return nil, fmt.Errorf("job %s (%s): webhook failed: %s", c.id, j.Status, j.Webhook.LastError)
			}
			if j.Status.Terminal() && j.Status != mj.StatusSucceeded {
				return nil, fmt.Errorf("job %s is %s: %s%s", c.id, j.Status, j.ErrorMessage, j.StatusDetail)
			}
			if j.Webhook != nil && j.Webhook.Status == "delivered" && c.end == 0 {
				// The rest of this revision's writes (the outbox delete) count too.
				c.end, c.took = w.rev, time.Since(t0)
				if h, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly()); err == nil {
					c.header = h.Header.Revision
				}
				tail = time.After(*etcdTail)
			}
		}
	}
}

// kindCost is one kind of key's part of a job's writes.
type kindCost struct {
	bytes, puts, dels int
}

func (c *etcdCost) byKind() map[string]*kindCost {
	m := map[string]*kindCost{}
	for _, k := range keyKinds {
		m[k] = &kindCost{}
	}
	for _, w := range c.writes {
		k := m[keyKind(w.key)]
		k.bytes += w.bytes
		if w.del {
			k.dels++
		} else {
			k.puts++
		}
	}
	return m
}

// progressReport is the size of the largest stored report's Progress, as the old
// design put it into the job record (`,"progress":{…}`).
func (c *etcdCost) progressReport() int {
	n := 0
	for _, w := range c.writes {
		if keyKind(w.key) != "progress" || w.del {
			continue
		}
		var rec store.ProgressRecord
		if json.Unmarshal(w.value, &rec) != nil {
			continue
		}
		b, _ := json.Marshal(rec.Progress)
		n = max(n, len(`,"progress":`)+len(b))
	}
	return n
}

// trace is the writes as one line per revision, the job's id shortened to <id>.
func trace(id string, ws []etcdWrite) string {
	var sb strings.Builder
	for i, w := range ws {
		if i == 0 || ws[i-1].rev != w.rev {
			fmt.Fprintf(&sb, "\n  rev %d:", w.rev)
		} else {
			sb.WriteString(",")
		}
		op := "put"
		if w.del {
			op = "del"
		}
		fmt.Fprintf(&sb, " %s %s (%d B)", op, strings.ReplaceAll(w.key, id, "<id>"), w.bytes)
	}
	return sb.String()
}

// foreign is a summary of the writes whose key does not name the job id (all
// writes when id is ""), by key: what a job costs beyond its own keys, or what
// else ran meanwhile.
func foreign(id string, ws []etcdWrite) string {
	n := map[string]int{}
	for _, w := range ws {
		if id == "" || !strings.Contains(w.key, id) {
			n[w.key]++
		}
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, n[k])
	}
	return strings.Join(parts, ", ")
}

// BenchmarkEtcdCost measures what one job costs etcd from just before its create
// to the write that records its webhook as delivered, for a short job and for one
// that runs 60 s and reports progress: etcd revisions (end − start; each
// transaction is one) and bytes written (len(key)+len(value) of every put and
// delete seen by a watch of the store's prefix from the starting revision), in
// all and per kind of key (jobs/, progress/, idx/, sidx/, queue/, active/, outbox/,
// done/, dispatcher/, other). Each starts once etcd has been quiet for 3 s, so
// nothing else writes meanwhile (the count of revisions without a write under the
// prefix says so: foreign-revs).
//
// For the 60 s job it also reports what the old design (every stored progress
// report rewrote the job record) would have cost: old-progress-B = progress
// reports stored × record-B, the job's key and last record before it ended
// (running, or dispatched when the task ended before the dispatcher saw it run)
// with the largest report in it as the record's field; old-B = B − progress/
// bytes + old-progress-B. Revisions are the same either way (one per report).
func BenchmarkEtcdCost(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	recv, err := startReceiver()
	if err != nil {
		b.Fatal(err)
	}
	defer recv.close()
	for _, job := range etcdCostJobs {
		b.Run(job.name, func(b *testing.B) {
			var costs []*etcdCost
			for range b.N {
				c, err := e.measureEtcdCost(ctx, recv, job.name, job.command)
				if err != nil {
					b.Fatal(err)
				}
				costs = append(costs, c)
			}
			b.StopTimer()
			c := costs[len(costs)-1] // -benchtime=1x: the one measurement
			revs := c.end - c.start
			seen := map[int64]bool{}
			total, puts, dels := 0, 0, 0
			for _, w := range c.writes {
				seen[w.rev] = true
				total += w.bytes
				if w.del {
					dels++
				} else {
					puts++
				}
			}
			kinds := c.byKind()
			b.ReportMetric(float64(revs), "revs")
			b.ReportMetric(float64(total), "B")
			b.ReportMetric(float64(puts), "puts")
			b.ReportMetric(float64(dels), "dels")
			b.ReportMetric(float64(revs-int64(len(seen))), "foreign-revs")
			b.ReportMetric(c.took.Seconds(), "s")
			for _, k := range keyKinds {
				b.ReportMetric(float64(kinds[k].bytes), k+"-B")
				b.ReportMetric(float64(kinds[k].puts+kinds[k].dels), k+"-ev")
			}
			stored := kinds["progress"].puts
			record := c.recordBytes + c.progressReport()
			old := stored * record
			b.ReportMetric(float64(stored), "progress-stored")
			b.ReportMetric(float64(record), "record-B")
			b.ReportMetric(float64(old), "old-progress-B")
			b.ReportMetric(float64(total-kinds["progress"].bytes+old), "old-B")

			if !c.quiet {
				b.Logf("%s: etcd's revision kept moving for a minute before the start; other writes may be counted", job.name)
			}
			if c.header != c.end {
				b.Logf("%s: header revision %d just after the delivered write (%d): later writes are not counted", job.name, c.header, c.end)
			}
			if f := foreign(c.id, c.writes); f != "" {
				b.Logf("%s: writes not naming the job: %s", job.name, f)
			}
			if len(c.after) > 0 {
				b.Logf("%s: %d writes in the %v after the delivery (not counted): %s", job.name, len(c.after), *etcdTail, foreign("", c.after))
			}
			// Printed, not logged: the testing package keeps 10 lines of a benchmark's log.
			if *etcdTrace {
				fmt.Printf("etcdcost %s: job %s, revisions %d → %d:%s\n", job.name, c.id, c.start, c.end, trace(c.id, c.writes))
				if len(c.after) > 0 {
					fmt.Printf("etcdcost %s: after the delivery (not counted):%s\n", job.name, trace(c.id, c.after))
				}
			}
		})
	}
}
