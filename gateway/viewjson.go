package gateway

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
)

// sendJob answers {"data": <j's view>}: the body of create, GET and cancel.
// The view is written field by field, byte for byte what encoding/json writes
// for fiber.Map{"data": view} (TestJobViewJSON compares them), without its
// reflection, map boxing and copies: the view is what polling clients fetch
// most. Values that are rare or nested (outputs, progress, webhook, usage,
// worker, analysis) and strings that need escaping go through encoding/json.
func (g *Gateway) sendJob(c *fiber.Ctx, j *mj.Job) error {
	v := g.view(j)
	return sendView(c, &v)
}

// sendView answers {"data": v}.
func sendView(c *fiber.Ctx, v *mj.JobView) error {
	bp := viewBufs.Get().(*[]byte)
	b, ok := appendJobData((*bp)[:0], v)
	if !ok { // a time encoding/json refuses: its error, as before
		viewBufs.Put(bp)
		return c.JSON(fiber.Map{"data": v})
	}
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBody(b) // copied
	if cap(b) <= 64<<10 {
		*bp = b
		viewBufs.Put(bp)
	}
	return nil
}

var viewBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// encodedView is the answer to GET of a cached job that is not terminal,
// written once (a job's record changes a few times, and is polled many), kept
// beside the job in the cache (jobCache.views): all of {"data":<view>} but
// status_detail's value, which a queued job's standing changes without the
// job. A terminal job's view is written at each GET: its links are signed
// with an expiry from now.
type encodedView struct {
	job        *mj.Job // the cached job it was written from
	head, tail []byte  // around the status_detail's value
}

// size is what the cache counts for it.
func (v *encodedView) size() int64 { return int64(64 + len(v.head) + len(v.tail)) }

// viewCacheable reports whether j's answer may be kept (encodedView): not
// terminal (no links), without progress (merged into a copy at each get), and
// not a chunked job (its steps are read at each get).
func viewCacheable(j *mj.Job) bool {
	return !j.Status.Terminal() && j.Progress == nil && !j.ChunkedParent()
}

// encodeView writes j's answer, split at status_detail; nil when a time is
// one encoding/json cannot write (sendView answers its error).
func (g *Gateway) encodeView(j *mj.Job) *encodedView {
	v := g.view(j)
	head, ok := appendJobDataHead(nil, &v)
	if !ok {
		return nil
	}
	return &encodedView{job: j, head: head, tail: appendJobDataTail(nil, &v)}
}

// sendEncoded answers {"data": <the view>} from ev with detail as its
// status_detail: the bytes sendView writes for the same job and detail.
func sendEncoded(c *fiber.Ctx, ev *encodedView, detail []byte) {
	resp := c.Response()
	resp.Header.SetContentType(fiber.MIMEApplicationJSON)
	var buf [256]byte
	resp.ResetBody()
	resp.AppendBody(ev.head)
	resp.AppendBody(appendJSONString(buf[:0], detail))
	resp.AppendBody(ev.tail)
}

// appendJobData appends {"data":<v>}; false when a time is one encoding/json
// cannot write (year outside 0-9999, or an offset of a day or more).
func appendJobData(b []byte, v *mj.JobView) ([]byte, bool) {
	b, ok := appendJobDataHead(b, v)
	b = appendJSONString(b, v.StatusDetail)
	return appendJobDataTail(b, v), ok
}

// appendJobDataHead appends {"data":<v>} up to the status_detail's value,
// and appendJobDataTail what follows it: a cached answer (encodedView) is
// written in two parts, around a detail that changes without the job.
func appendJobDataHead(b []byte, v *mj.JobView) ([]byte, bool) {
	ok := true
	tm := func(b []byte, t time.Time) []byte {
		if y := t.Year(); y < 0 || y > 9999 {
			ok = false
			return b
		}
		if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
			ok = false
			return b
		}
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	tp := func(b []byte, t *time.Time) []byte {
		if t == nil {
			return append(b, "null"...)
		}
		return tm(b, *t)
	}
	b = append(b, `{"data":{"id":`...)
	b = appendJSONString(b, v.ID)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(v.Status))
	b = append(b, `,"output_files":`...)
	b = appendStringMap(b, v.OutputFiles)
	b = append(b, `,"error_message":`...)
	b = appendJSONString(b, v.ErrorMessage)
	b = append(b, `,"created_at":`...)
	b = tm(b, v.CreatedAt)
	b = append(b, `,"queued_at":`...)
	b = tm(b, v.QueuedAt)
	b = append(b, `,"updated_at":`...)
	b = tm(b, v.UpdatedAt)
	b = append(b, `,"started_at":`...)
	b = tp(b, v.StartedAt)
	b = append(b, `,"finished_at":`...)
	b = tp(b, v.FinishedAt)
	b = append(b, `,"machine":`...)
	b = appendJSONString(b, v.Machine)
	b = append(b, `,"input_files":`...)
	b = appendStringMap(b, v.InputFiles)
	b = append(b, `,"ffmpeg_commands":`...)
	if v.FFmpegCommands == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, s := range v.FFmpegCommands {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s)
		}
		b = append(b, ']')
	}
	b = append(b, `,"webhook_url":`...)
	if v.WebhookURL == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *v.WebhookURL)
	}
	b = append(b, `,"timeout_seconds":`...)
	b = strconv.AppendInt(b, int64(v.TimeoutSeconds), 10)
	b = append(b, `,"metadata":`...)
	b = appendStringMap(b, v.Metadata)
	b = append(b, `,"progress":`...)
	b = appendValue(b, v.Progress == nil, v.Progress)
	b = append(b, `,"outputs":`...)
	if v.Outputs != nil && len(v.Outputs) == 0 {
		b = append(b, "{}"...)
	} else {
		b = appendValue(b, v.Outputs == nil, v.Outputs)
	}
	b = append(b, `,"status_detail":`...)
	return b, ok
}

func appendJobDataTail(b []byte, v *mj.JobView) []byte {
	b = append(b, `,"webhook":`...)
	b = appendValue(b, v.Webhook == nil, v.Webhook)
	b = append(b, `,"total_input_bytes":`...)
	b = appendInt64p(b, v.TotalInputBytes)
	b = append(b, `,"total_output_bytes":`...)
	b = appendInt64p(b, v.TotalOutputBytes)
	b = append(b, `,"logs":`...)
	b = appendStringMap(b, v.Logs)
	b = append(b, `,"analysis":`...)
	if v.Analysis != nil && len(v.Analysis) == 0 {
		b = append(b, "[]"...)
	} else {
		b = appendValue(b, v.Analysis == nil, v.Analysis)
	}
	b = append(b, `,"usage":`...)
	b = appendValue(b, v.Usage == nil, v.Usage)
	b = append(b, `,"worker":`...)
	b = appendValue(b, v.Worker == nil, v.Worker)
	if v.Pipeline != nil { // omitempty: only a pipeline's jobs have it
		b = append(b, `,"pipeline":`...)
		b = appendValue(b, false, v.Pipeline)
	}
	if v.Parallel != nil { // omitempty: only jobs that asked for chunked encoding have it
		b = append(b, `,"parallel":`...)
		b = appendValue(b, false, v.Parallel)
	}
	return append(b, "}}"...)
}

// appendValue appends null, or x as encoding/json writes it (these types
// cannot fail to encode).
func appendValue(b []byte, null bool, x any) []byte {
	if null {
		return append(b, "null"...)
	}
	raw, err := json.Marshal(x)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, raw...)
}

func appendInt64p(b []byte, n *int64) []byte {
	if n == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, *n, 10)
}

// appendJSONString appends s quoted as encoding/json does: plain printable
// ASCII as it is, anything else (quotes, backslashes, <, >, &, controls,
// non-ASCII) through encoding/json itself.
func appendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		if !plainJSON[s[i]] {
			raw, _ := json.Marshal(string(s))
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSON tells the bytes encoding/json writes as they are in a string.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendStringMap appends m with its keys sorted, as encoding/json does.
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	var small [8]string
	keys := small[:0]
	if len(m) > len(small) {
		keys = make([]string, 0, len(m))
	}
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) > len(small) {
		slices.Sort(keys)
	} else {
		for i := 1; i < len(keys); i++ { // insertion sort: a few keys
			for k := i; k > 0 && keys[k] < keys[k-1]; k-- {
				keys[k], keys[k-1] = keys[k-1], keys[k]
			}
		}
	}
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}
