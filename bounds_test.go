package mediajobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// fill returns a string of exactly n stored bytes (mj.StoredLen), mostly of
// characters JSON escapes, so that its raw length is far below n.
func fill(n int) string {
	s := strings.Repeat("&", n/6) + strings.Repeat("x", n%6)
	if mj.StoredLen(s) != n {
		panic("fill")
	}
	return s
}

// name returns a name of exactly n bytes from the characters names allow.
func name(prefix string, n int) string {
	return prefix + strings.Repeat("a", n-len(prefix))
}

// largestRecord is the largest job the validation and the bounds allow: every
// create-time setting at its ceiling, every field at its maximum, and the largest
// runner result, bounded as the dispatcher bounds it.
func largestRecord(t *testing.T) (create *mj.Job, finish func(*mj.Job)) {
	t.Helper()
	now := time.Date(2999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	const attempt = math.MaxInt64 // the longest attempt number in keys

	// What a client controls (gateway/validate.go; gateway's TestCreateBounds shows
	// these are the most a create accepts, and one byte more is refused).
	inputs := map[string]string{}
	for i := 0; i < mj.CeilMaxInputs; i++ {
		// An input name is at most 128 characters (command.ValidName).
		u := "https://media.example/" + fmt.Sprint(i) + "?"
		inputs[name(fmt.Sprintf("in%d_", i), 128)] = u + fill(mj.MaxURLBytes-len(u))
	}
	var outputNames []string
	for i := 0; i < mj.CeilMaxOutputs; i++ {
		if i%2 == 1 {
			// A directory with a variant, and a counter: 128 characters, each
			// pattern counted as one (mj.ValidOutputName).
			outputNames = append(outputNames, name(fmt.Sprintf("d%d_", i), 61)+"%v/"+name("o", 61)+"%09d.ts")
			continue
		}
		// 127 characters around a counter of 4 (mj.ValidOutputName).
		outputNames = append(outputNames, name(fmt.Sprintf("o%d_", i), 124)+"%09d.ts")
	}
	for _, n := range outputNames {
		if !mj.ValidOutputName(n) {
			t.Fatalf("output name %q is not valid", n)
		}
		if strings.Contains(n, "/") && mj.ValidOutputName("x"+n) {
			t.Fatalf("output name %q is not the longest valid", n)
		}
	}
	var cmds []string
	for i := 0; i < mj.CeilMaxCommands; i++ {
		cmds = append(cmds, fill(mj.CeilMaxCommandBytes/mj.CeilMaxCommands))
	}
	cmds[0] += fill(mj.CeilMaxCommandBytes % mj.CeilMaxCommands)
	metadata := map[string]string{}
	for i := 0; i < mj.MaxMetadataKeys; i++ {
		metadata[fmt.Sprintf("k%02d", i)] = fill(mj.MaxMetadataBytes/mj.MaxMetadataKeys - 3)
	}
	j := &mj.Job{
		ID: "01234567-89ab-cdef-0123-456789abcdef", AccountID: "fedcba98-7654-3210-fedc-ba9876543210",
		Status:     mj.StatusQueued,
		InputFiles: inputs, OutputNames: outputNames, FFmpegCommands: cmds,
		WebhookURL: "https://hooks.example/?" + fill(mj.MaxURLBytes-len("https://hooks.example/?")),
		Machine:    name("pool", 64), TimeoutSeconds: math.MaxInt64, Metadata: metadata,
		CreatedAt: now, QueuedAt: now, UpdatedAt: now, MaxInputBytes: math.MaxInt64,
	}
	// One input names another job's output (job:<id>/<output>): with its key
	// (InputKeys) and while awaited (Awaits) it takes ≈ 600 bytes, less than
	// a URL input, so the largest record names URLs but for this one, which
	// sets those fields.
	dep := "fedcba98-7654-3210-fedc-ba9876543211"
	refName := name("in0_", 128)
	refOutput := name("o", 147)
	inputs[refName] = "job:" + dep + "/" + refOutput
	j.Awaits = []string{dep}
	j.InputKeys = map[string]string{refName: mj.RunScope(dep, attempt) + name("alloc", 36) + "/" + mj.OutputsDir + refOutput}
	// A pipeline's step: its name at most 64 characters (gateway's stepNameRe),
	// its item at most the fan-out ceiling.
	item := math.MaxInt64
	j.Pipeline = &mj.PipelineRef{ID: "01234567-89ab-cdef-0123-456789abcdee", Step: name("step", 64), Item: &item, Intermediate: true}
	// Chunked encoding: a parent's record (one command, input and output in
	// fact) with its report at the bound, and a chunk job's task with a chunk.
	report := `{"pass":false,"failures":["` + fill(mj.MaxVerificationBytes-40) + `"]}`
	j.Parallel = &mj.Parallel{Mode: mj.ParallelChunked, Reason: fill(200), ChunkSeconds: math.MaxFloat64, MaxWorkers: math.MaxInt, MaxChunks: math.MaxInt,
		Fallback: true, SceneCuts: true, Quality: true, PipelineID: "01234567-89ab-cdef-0123-456789abcdee", Verification: mj.BoundVerification([]byte(report))}
	j.Chunk = &mj.ChunkTask{Phase: mj.PhaseEncode, Input: refName, Output: outputNames[0], ChunkSeconds: math.MaxFloat64, MaxChunks: math.MaxInt, Chunks: math.MaxInt, SceneCuts: true,
		Chunk: json.RawMessage(`{"index":9223372036854775807,"start":-1.7976931348623157e+308,"end":-1.7976931348623157e+308,"frames":9223372036854775807,"last":true,"first_packet":9223372036854775807,"packets":9223372036854775807,"trim_from":-1.7976931348623157e+308,"trim_to":-1.7976931348623157e+308,` +
			`"scene_cut":true,"rotation":-1.7976931348623157e+308,"pre_roll":9223372036854775807,"post_roll":9223372036854775807,"roll_from":-1.7976931348623157e+308,"roll_to":-1.7976931348623157e+308,"split_key":-1.7976931348623157e+308,"split_from":-1.7976931348623157e+308}`)}
	if v := reflect.ValueOf(j).Elem().FieldByName("IdemHash"); v.IsValid() {
		v.SetString(strings.Repeat("f", 64)) // a sha256 in hex, set by the store
	}

	// What a runner reports, far over every bound; the dispatcher bounds it
	// (dispatcher/events.go: checked).
	d := -math.MaxFloat64
	var stream = mj.Stream{Type: fill(1000), Codec: fill(1000), Width: math.MinInt, Height: math.MinInt, SampleRate: math.MinInt, Channels: math.MinInt}
	streams := make([]mj.Stream, 100)
	for i := range streams {
		streams[i] = stream
	}
	var outs []mj.Output
	for i := 0; i < mj.CeilMaxOutputFiles; i++ {
		decl := outputNames[i%len(outputNames)]
		file := strings.Replace(strings.Replace(decl, "%09d", fmt.Sprintf("%020d", i), 1), "%v", "0", 1)
		outs = append(outs, mj.Output{Name: file, Size: math.MaxInt64,
			Probe: &mj.Probe{DurationSeconds: &d, Format: fill(10000), Streams: streams},
			// Far more deliveries than a job may have destinations (mj.MaxDestinations).
			Destination: &mj.Delivery{URL: fill(10000), Status: fill(100), HTTPStatus: math.MinInt, SHA256: fill(100), Kept: true}})
	}
	// Analysis blocks far over their bound: many, with long names and data of
	// characters JSON escapes.
	var analysis []mj.Analysis
	for i := 0; i < 1000; i++ {
		data, _ := json.Marshal(map[string]string{"input_i": fill(100)})
		analysis = append(analysis, mj.Analysis{Command: math.MinInt, Filter: fill(1000), Instance: fill(1000), Data: data})
	}
	raw := &mj.Result{JobID: j.ID, Attempt: attempt, Succeeded: true, ErrorMessage: fill(1 << 20), Outputs: outs, InputBytes: math.MaxInt64, Analysis: analysis}
	r := mj.BoundResult(raw)
	if err := mj.CheckOutputs(r.Outputs, outputNames, mj.CeilMaxOutputFiles); err != nil {
		t.Fatalf("the largest result is one the dispatcher refuses: %v", err)
	}
	if enc, _ := json.Marshal(r.Analysis); len(r.Analysis) < 2 || len(enc) > mj.MaxAnalysisBytes || len(enc) < mj.MaxAnalysisBytes-1000 {
		t.Fatalf("the largest analysis takes %d bytes in %d blocks, want nearly MaxAnalysisBytes", len(enc), len(r.Analysis))
	}
	for _, o := range r.Outputs {
		if len(o.Name) != mj.MaxOutputNameBytes {
			t.Fatalf("output name %q is not MaxOutputNameBytes long", o.Name)
		}
	}

	finish = func(j *mj.Job) {
		// dispatcher's runScope, and the directory of the allocation (a Nomad
		// allocation ID) that ran the attempt
		scope := fmt.Sprintf("jobs/%s/%d/%s/", j.ID, attempt, "76543210-fedc-ba98-7654-3210fedcba98")
		j.Status, j.Attempt = mj.StatusSucceeded, attempt
		// Usage at its ceiling (the dispatcher bounds what a runner reports).
		u := mj.Usage{WallSeconds: math.MaxFloat64, CPUSeconds: math.MaxFloat64, GPUSeconds: math.MaxFloat64,
			InputBytes: math.MaxInt64, OutputBytes: math.MaxInt64}.Bounded()
		j.Usage = &u
		j.Parallel.Usage = &u           // a chunked parent's summary: its jobs' sum, Bounded as one
		j.MaxInputBytes = math.MaxInt64 // the store sets the account's (here no limit) at create
		j.Outputs, j.TotalInputBytes, j.TotalOutputBytes = nil, r.InputBytes, math.MaxInt64
		for _, o := range r.Outputs {
			o.Key = scope + "outputs/" + o.Name // dispatcher's transition
			j.Outputs = append(j.Outputs, o)
		}
		for n := 1; n <= len(j.FFmpegCommands); n++ { // one log per command
			j.LogCommands = append(j.LogCommands, n)
		}
		j.LogsPrefix = scope
		j.Analysis = r.Analysis
		// Not at once in real life (a succeeded job has no error), but each at its
		// largest here.
		j.ErrorMessage = r.ErrorMessage
		j.StatusDetail = mj.Clip(fill(1<<20), mj.MaxDetailBytes)
		j.PlacementReason = mj.Clip(fill(1<<20), mj.MaxDetailBytes)
		j.NomadJobID = name("mediajobs-"+j.Machine+"/dispatch-"+j.ID, 200)
		// Set by the dispatcher from Nomad's ids: a child's, and an allocation's.
		j.Worker = &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: j.NomadJobID, AllocationID: "01234567-89ab-cdef-0123-456789abcdef"}
		pct, eta := -math.MaxFloat64, -math.MaxFloat64
		j.Progress = &mj.Progress{Percent: &pct, CommandIndex: math.MinInt, CommandCount: math.MinInt, FPS: -math.MaxFloat64,
			Speed: -math.MaxFloat64, OutTimeSeconds: -math.MaxFloat64, ETASeconds: &eta, UpdatedAt: now}
		j.DispatchedAt, j.AttemptStartedAt, j.StartedAt, j.FinishedAt = &now, &now, &now, &now
		// Counted up to 3 by the dispatcher (dispatcher/warm.go): the longest int is more.
		j.WarmLapses, j.GivenBack = math.MinInt, math.MinInt
		j.Webhook = &mj.WebhookState{Status: "delivered", DeliveryID: j.ID, Attempts: math.MinInt, LastHTTPStatus: math.MinInt,
			LastError: mj.Clip(fill(1<<20), mj.MaxDetailBytes), DeliveredAt: &now}
		// Flags take at most 5 bytes ("true"): all set, nothing to bound.
		v := reflect.ValueOf(j).Elem()
		for i := 0; i < v.NumField(); i++ {
			if v.Field(i).Kind() == reflect.Bool {
				v.Field(i).SetBool(true)
			}
		}
	}
	return j, finish
}

// TestLargestJobFitsEtcd is the proof that bounds.go's bounds add up: the largest
// job record they allow is stored on a real etcd (created, then updated with its
// outputs) and takes at most JobRecordBudget, two thirds of etcd's request limit.
func TestLargestJobFitsEtcd(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()

	// etcd's limit is the one we think it is: a value of EtcdRequestLimit is refused.
	if _, err := e.Client.Put(ctx, "/test/too-large", strings.Repeat("x", mj.EtcdRequestLimit)); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("a put of %d bytes: %v, want etcd's request-too-large", mj.EtcdRequestLimit, err)
	}

	j, finish := largestRecord(t)
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatalf("create the largest job: %v", err)
	}
	created, _ := json.Marshal(j)
	got, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { finish(j); return nil })
	if err != nil {
		t.Fatalf("store the largest job's result: %v", err)
	}
	assertAllSet(t, reflect.ValueOf(*got), "Job")

	resp, err := e.Client.Get(ctx, "/test/jobs/"+j.ID)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the stored job: %v", err)
	}
	size := len(resp.Kvs[0].Value)
	t.Logf("largest job record: %d bytes (%d at create), %.1f%% of the budget of %d, %.1f%% of etcd's request limit of %d",
		size, len(created), 100*float64(size)/mj.JobRecordBudget, mj.JobRecordBudget, 100*float64(size)/mj.EtcdRequestLimit, mj.EtcdRequestLimit)
	if size > mj.JobRecordBudget {
		t.Fatalf("the largest job record takes %d bytes, over the budget of %d (2/3 of etcd's %d): lower a bound in bounds.go", size, mj.JobRecordBudget, mj.EtcdRequestLimit)
	}
	back, err := s.Job(ctx, j.ID)
	if err != nil || len(back.Outputs) != mj.CeilMaxOutputFiles {
		t.Fatalf("read back: %v", err)
	}
}

// assertAllSet fails for a field the largest record leaves empty: a new field needs
// a bound (bounds.go) and its largest value in largestRecord.
func assertAllSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("%s is nil in the largest job: bound it and set it in largestRecord", path)
			return
		}
		assertAllSet(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.Tag.Get("json") == "-" {
				continue
			}
			assertAllSet(t, v.Field(i), path+"."+f.Name)
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			t.Errorf("%s is empty in the largest job: bound it and set it in largestRecord", path)
			return
		}
		if v.Kind() == reflect.Slice {
			assertAllSet(t, v.Index(0), path+"[0]")
		}
	default:
		if v.IsZero() {
			t.Errorf("%s is zero in the largest job: bound it and set it in largestRecord", path)
		}
	}
}

func TestStoredLenIsTheJSONLength(t *testing.T) {
	check := func(s string) {
		t.Helper()
		b, _ := json.Marshal(s)
		if got, want := mj.StoredLen(s), len(b)-2; got != want {
			t.Fatalf("StoredLen(%q) = %d, json.Marshal takes %d", s, got, want)
		}
	}
	for c := 0; c < 256; c++ {
		check(string([]byte{byte(c)}))
		check("a" + string([]byte{byte(c)}) + "é")
	}
	for _, s := range []string{"", "\u2028\u2029", "\ufffd", "😀", "\xe2\x80", "\xf0\x9f\x98", "https://s3.example/k?X-Amz-Date=1&X-Amz-Signature=ab<>"} {
		check(s)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		b := make([]byte, rng.Intn(40))
		for k := range b {
			b[k] = byte(rng.Intn(256))
		}
		check(string(b))
		check(strings.ToValidUTF8(string(b), "\u2028"))
	}
}

func TestClip(t *testing.T) {
	if got := mj.Clip("short", 10); got != "short" {
		t.Fatalf("Clip kept %q", got)
	}
	rng := rand.New(rand.NewSource(2))
	alphabet := []string{"a", "é", "😀", "&", "\n", "\u2028", "\x01", "\""}
	for i := 0; i < 2000; i++ {
		var b strings.Builder
		for k := rng.Intn(60); k > 0; k-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		s, n := b.String(), rng.Intn(80)
		got := mj.Clip(s, n)
		if mj.StoredLen(got) > n || !utf8.ValidString(got) {
			t.Fatalf("Clip(%q, %d) = %q: %d stored bytes", s, n, got, mj.StoredLen(got))
		}
		if got != s {
			body := strings.TrimSuffix(got, mj.ClipMark)
			if !strings.HasPrefix(s, body) || n >= mj.StoredLen(mj.ClipMark) && body == got {
				t.Fatalf("Clip(%q, %d) = %q: not a marked prefix", s, n, got)
			}
		}
	}
	// A long error keeps its beginning and says it was cut.
	msg := "command 1 failed: " + strings.Repeat("é", 10000)
	got := mj.Clip(msg, mj.MaxErrorBytes)
	if !strings.HasPrefix(got, "command 1 failed: éé") || !strings.HasSuffix(got, mj.ClipMark) || mj.StoredLen(got) > mj.MaxErrorBytes || mj.StoredLen(got) < mj.MaxErrorBytes-2 {
		t.Fatalf("Clip of a long error: %d bytes, ends %q", len(got), got[len(got)-30:])
	}
}

func TestBoundResult(t *testing.T) {
	if mj.BoundResult(nil) != nil {
		t.Fatal("BoundResult(nil) is not nil")
	}
	d := 6.006
	small := &mj.Probe{DurationSeconds: &d, Format: "mpegts", Streams: []mj.Stream{{Type: "video", Codec: "h264", Width: 1920, Height: 1080}, {Type: "audio", Codec: "aac", SampleRate: 48000, Channels: 2}}}
	big := &mj.Probe{Format: strings.Repeat("f", 100), Streams: make([]mj.Stream, 20)}
	for i := range big.Streams {
		big.Streams[i] = mj.Stream{Type: strings.Repeat("t", 100), Codec: strings.Repeat("c", 100)}
	}
	r := &mj.Result{JobID: "j", Attempt: 1, Succeeded: true, ErrorMessage: strings.Repeat("e", 10000),
		Outputs: []mj.Output{{Name: "a.ts", Size: 1, Probe: small}, {Name: "b.ts", Size: 2, Probe: big}, {Name: "c.ts"}}}
	before, _ := json.Marshal(r)
	b := mj.BoundResult(r)
	if after, _ := json.Marshal(r); string(after) != string(before) {
		t.Fatal("BoundResult changed its argument")
	}
	if mj.StoredLen(b.ErrorMessage) > mj.MaxErrorBytes || !strings.HasSuffix(b.ErrorMessage, mj.ClipMark) {
		t.Fatalf("error message: %d bytes", len(b.ErrorMessage))
	}
	if !reflect.DeepEqual(b.Outputs[0], r.Outputs[0]) || b.Outputs[2].Probe != nil || len(b.Outputs) != 3 {
		t.Fatalf("a small probe changed: %+v", b.Outputs)
	}
	p := b.Outputs[1].Probe
	if len(p.Streams) != mj.MaxProbeStreams || len(p.Format) != mj.MaxProbeFormatBytes || len(p.Streams[0].Codec) != mj.MaxProbeNameBytes || len(p.Streams[7].Type) != mj.MaxProbeNameBytes {
		t.Fatalf("big probe: %d streams, format %d bytes, codec %d bytes", len(p.Streams), len(p.Format), len(p.Streams[0].Codec))
	}

	// 1,000 HLS segments keep their probes; past MaxProbeBytes, outputs keep none.
	var outs []mj.Output
	for i := 0; i < 3000; i++ {
		outs = append(outs, mj.Output{Name: fmt.Sprintf("seg_%05d.ts", i), Probe: small})
	}
	b = mj.BoundResult(&mj.Result{Succeeded: true, Outputs: outs})
	total := 0
	for i, o := range b.Outputs {
		if o.Probe == nil {
			if i < 1000 {
				t.Fatalf("output %d of an HLS job lost its probe", i)
			}
			continue
		}
		enc, _ := json.Marshal(o.Probe)
		total += len(enc)
	}
	if total > mj.MaxProbeBytes || b.Outputs[2999].Probe != nil {
		t.Fatalf("probes take %d bytes", total)
	}
	// A probe encoding/json cannot write (NaN) is dropped, not stored.
	nan := math.NaN()
	b = mj.BoundResult(&mj.Result{Outputs: []mj.Output{{Name: "x", Probe: &mj.Probe{DurationSeconds: &nan}}}})
	if b.Outputs[0].Probe != nil {
		t.Fatal("kept a probe json cannot encode")
	}
}

func TestCheckOutputsBoundsNames(t *testing.T) {
	decl := []string{"seg_%03d.ts"}
	ok := "seg_" + strings.Repeat("1", mj.MaxOutputNameBytes-len("seg_.ts")) + ".ts"
	if err := mj.CheckOutputs([]mj.Output{{Name: ok}}, decl, 10); err != nil {
		t.Fatal(err)
	}
	long := "seg_" + strings.Repeat("1", 1<<20) + ".ts"
	err := mj.CheckOutputs([]mj.Output{{Name: long}}, decl, 10)
	if err == nil || len(err.Error()) > 500 {
		t.Fatalf("a %d-byte name: %v", len(long), err != nil)
	}
}
