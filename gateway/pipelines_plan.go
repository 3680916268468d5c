package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
)

// Planning a pipeline (docs/pipelines.md): the document is checked whole and
// turned into the jobs it makes, ids assigned, before anything is stored.

// pipelineRequest is the body of POST /api/pipelines.
type pipelineRequest struct {
	Steps      map[string]*stepRequest `json:"steps"`
	WebhookURL string                  `json:"webhook_url,omitempty"`
	FailFast   bool                    `json:"fail_fast,omitempty"`
	Metadata   map[string]string       `json:"metadata,omitempty"`
}

// stepRequest is one step: a job body, and the items it runs once per.
type stepRequest struct {
	createRequest
	ForEach []map[string]string `json:"for_each,omitempty"`
	// Publish false keeps the step's outputs for the steps after only: no
	// links, deleted when the pipeline ends (docs/pipelines.md#intermediate-outputs).
	Publish *bool `json:"publish,omitempty"`
}

// intermediate reports whether s says "publish": false.
func (s *stepRequest) intermediate() bool { return s.Publish != nil && !*s.Publish }

// decodePipeline parses a pipeline body whatever its Content-Type says. Each
// step is decoded by itself, so that a value of the wrong type is named by its
// step and field (steps.<step>.<field>).
func decodePipeline(body []byte) (*pipelineRequest, error) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, mj.Errorf(mj.EValidation, "request body is empty; send a JSON object with \"steps\"")
	}
	var doc struct {
		pipelineRequest
		Steps map[string]json.RawMessage `json:"steps"` // shadows pipelineRequest's
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, pipelineTypeError(err, "", "request body")
	}
	req := doc.pipelineRequest
	if doc.Steps != nil {
		req.Steps = make(map[string]*stepRequest, len(doc.Steps))
	}
	for _, name := range sortedKeys(doc.Steps) {
		var s *stepRequest
		if err := json.Unmarshal(doc.Steps[name], &s); err != nil {
			return nil, pipelineTypeError(err, "steps."+name+".", "steps."+name)
		}
		req.Steps[name] = s
	}
	return &req, nil
}

// pipelineTypeError says which field of the document err (json.Unmarshal's)
// is about: prefix goes before the decoder's field path, whole names the
// value decoded when the path is empty.
func pipelineTypeError(err error, prefix, whole string) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		e := mj.Errorf(mj.EValidation, "request body is not valid JSON: %v", err)
		e.Details = map[string]string{"request body": "not valid JSON"}
		return e
	}
	// The decoder names the fields of an embedded struct after it.
	field := te.Field
	for _, embedded := range []string{"pipelineRequest.", "createRequest."} {
		field = strings.TrimPrefix(field, embedded)
	}
	field = prefix + field
	if te.Field == "" {
		field = whole
	}
	want := pipelineJSONType(field, te.Type.String())
	if field == "request body" {
		want = `a JSON object with "steps"`
	}
	e := mj.Errorf(mj.EValidation, "%s must be %s, not a JSON %s", field, want, te.Value)
	e.Details = map[string]string{field: "wrong type"}
	return e
}

func pipelineJSONType(field, goType string) string {
	switch {
	case strings.HasSuffix(field, "for_each"):
		return `a list of objects of strings, as in [{"height": "720"}]`
	case goType == "bool":
		return "true or false"
	case field == "steps":
		return "an object of steps by name"
	case strings.HasPrefix(goType, "gateway.stepRequest"):
		return "a job body"
	}
	return jsonType(field, goType)
}

var (
	stepNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	itemKeyRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	// stepRefRe: step:<name>/<output>, step:<name>[*]/<output> (every item),
	// step:<name>[<n>]/<output>, step:<name>[${index}]/<output> (the item of
	// the same index).
	stepRefRe = regexp.MustCompile(`^step:([^/\[\]]+)(?:\[([^\]]*)\])?/(.+)$`)
)

// StepRefPrefix starts an input naming another step's output.
const stepRefPrefix = "step:"

// maxItemValue bounds one value of a for_each item.
const maxItemValue = 1024

// stepRef is a parsed step:… input.
type stepRef struct {
	step   string
	index  string // "", "*", a number, or "${index}"
	output string // as the producing step writes it in output_files
}

// plannedPipeline is a checked pipeline: its record, with every job in its
// plan, and for a dry run the step and item each job id stands for.
type plannedPipeline struct {
	p      *mj.Pipeline
	labels map[string]string // job id -> step:<name>[<i>]
}

// planPipeline checks req whole and plans its jobs, for account at now. Every
// problem is reported at once, keyed steps.<step>.<field>; nothing is stored.
// resolve checks the inputs that name jobs outside the pipeline, as a job's
// create does (it may add to problems).
func planPipeline(req *pipelineRequest, cfg *config.Config, account string, now time.Time) (*plannedPipeline, error) {
	problems := map[string]string{}
	bad := func(field, format string, args ...any) {
		if _, ok := problems[field]; !ok {
			problems[field] = fmt.Sprintf(format, args...)
		}
	}
	lim := cfg.Pipelines
	names := sortedKeys(req.Steps)
	switch {
	case len(req.Steps) == 0:
		bad("steps", `give at least one step: "steps": {"name": {a job body}, ...}`)
	case len(req.Steps) > lim.MaxSteps:
		bad("steps", "%d steps; at most %d (pipelines.max_steps)", len(req.Steps), lim.MaxSteps)
	}
	if req.WebhookURL != "" {
		if err := checkURL(req.WebhookURL); err != nil {
			bad("webhook_url", "%v", err)
		}
	}
	if err := checkMetadata(req.Metadata); err != "" {
		bad("metadata", "%s", err)
	}

	// Each step's jobs, ids assigned, and its references.
	ids := map[string][]string{}
	total := 0
	for _, name := range names {
		s, f := req.Steps[name], "steps."+name
		if s == nil {
			bad(f, "a step is a job body (an object), not null")
			continue
		}
		if !stepNameRe.MatchString(name) {
			bad(f, "step name must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}")
		}
		// Bounded before the references are checked: that check's work grows
		// with the inputs, outputs and items (a body of 1 MiB held a CPU for
		// hours before).
		if max := cfg.Server.MaxInputs; len(s.InputFiles) > max {
			bad(f+".input_files", "%d inputs; at most %d (server.max_inputs)", len(s.InputFiles), max)
		}
		if max := cfg.Server.MaxOutputs; len(s.OutputFiles) > max {
			bad(f+".output_files", "%d outputs; at most %d (server.max_outputs)", len(s.OutputFiles), max)
		}
		if s.Parallel != nil {
			bad(f+".parallel", "chunked encoding (\"parallel\") is for single jobs (POST /api/ffmpeg), not a pipeline's steps; run the encode as a job of its own")
		}
		n := 1
		if s.ForEach != nil {
			n = len(s.ForEach)
			switch {
			case n == 0:
				bad(f+".for_each", "list at least one item, or leave for_each out for a step that runs once")
			case n > lim.MaxFanOut:
				bad(f+".for_each", "%d items; at most %d (pipelines.max_fan_out)", n, lim.MaxFanOut)
			}
			for i, item := range s.ForEach {
				for k, v := range item {
					if !itemKeyRe.MatchString(k) {
						bad(fmt.Sprintf("%s.for_each[%d]", f, i), "key %q must match [A-Za-z_][A-Za-z0-9_]{0,63}", mj.Clip(k, 64))
					}
					if len(v) > maxItemValue {
						bad(fmt.Sprintf("%s.for_each[%d].%s", f, i, k), "%d bytes; at most %d", len(v), maxItemValue)
					}
				}
			}
		}
		total += max(n, 1)
		for range max(n, 1) {
			ids[name] = append(ids[name], uuid.NewString())
		}
	}
	if total > lim.MaxJobs {
		bad("steps", "the steps make %d jobs; at most %d (pipelines.max_jobs)", total, lim.MaxJobs)
	}
	if len(problems) > 0 {
		return nil, validationError(problems)
	}

	// References between steps: each must name a step and one of its outputs.
	refs := map[string]map[string]stepRef{} // step -> input -> ref
	needs := map[string][]string{}
	pc := patternCache{}
	for _, name := range names {
		s := req.Steps[name]
		refs[name] = map[string]stepRef{}
		if n := jobInputs(s, req.Steps); n > cfg.Server.MaxInputs {
			bad("steps."+name+".input_files", "%d inputs, one per item a step:<step>[*]/<output> takes; at most %d (server.max_inputs)", n, cfg.Server.MaxInputs)
			continue
		}
		for _, in := range sortedKeys(s.InputFiles) {
			v := s.InputFiles[in]
			if !strings.HasPrefix(v, stepRefPrefix) {
				continue
			}
			field := "steps." + name + ".input_files." + in
			r, msg := parseStepRef(v, name, req.Steps, pc)
			if msg != "" {
				bad(field, "%s", msg)
				continue
			}
			refs[name][in] = r
			if !slices.Contains(needs[name], r.step) {
				needs[name] = append(needs[name], r.step)
			}
		}
		slices.Sort(needs[name])
	}
	// A step that does not publish its outputs must have a reader: else
	// they would be deleted, unread, when the pipeline ends. (Only once every
	// reference parsed: needs is whole then.)
	refsOK := len(problems) == 0
	for _, name := range names {
		if !refsOK || !req.Steps[name].intermediate() {
			continue
		}
		read := false
		for _, other := range names {
			read = read || other != name && slices.Contains(needs[other], name)
		}
		if !read {
			bad("steps."+name+".publish", `step %s has "publish": false, but no step takes its outputs (step:%s/<output>): they would be deleted unread when the pipeline ends; take them in a step, or publish them (leave "publish" out)`, name, name)
		}
	}
	if len(problems) == 0 {
		if cycle := findCycle(names, needs); cycle != nil {
			bad("steps."+cycle[0]+".input_files", "steps %s form a cycle: none of them could ever start", strings.Join(cycle, " → "))
		}
	}
	if len(problems) > 0 {
		return nil, validationError(problems)
	}

	// The jobs, through the same checks as a job's create.
	p := &mj.Pipeline{ID: uuid.NewString(), AccountID: account, FailFast: req.FailFast, WebhookURL: req.WebhookURL,
		Metadata: req.Metadata, CreatedAt: now.UTC(), UpdatedAt: now.UTC()}
	labels := map[string]string{}
	jobs := map[string][]*mj.Job{}
	for _, name := range names {
		s, f := req.Steps[name], "steps."+name
		if len(s.OutputDestinations) > 0 {
			bad(f+".output_destinations", "output_destinations is not available in a pipeline's steps: a step's outputs stay in this service's storage, where the steps after take them. Download the outputs from their links in GET /api/pipelines/{id} (mediajobs pipeline run -d DIR saves them all), or send one on with a job of its own once the step succeeded: input_files {\"x\": \"job:<step's job id>/<output>\"}, a copy command (-i {{x}} -c copy {{out.mp4}}) and output_destinations")
			continue
		}
		if s.KeepOutputs != nil {
			bad(f+".keep_outputs", `keep_outputs is not available in a pipeline's steps (it goes with output_destinations): for outputs only the steps after need, write "publish": false, and they are deleted when the pipeline ends`)
			continue
		}
		for i, id := range ids[name] {
			var item map[string]string
			itemIdx := -1
			if s.ForEach != nil {
				item, itemIdx = s.ForEach[i], i
			}
			jreq, field, msg := stepJob(s, name, item, itemIdx, refs[name], req.Steps, ids)
			if msg != "" {
				bad(f+"."+field, "%s", forItem(itemIdx, msg))
				break
			}
			j, err := newJob(jreq, cfg, account, now)
			if err != nil {
				var e *mj.Error
				if errors.As(err, &e) {
					for k, v := range e.Details {
						bad(f+"."+k, "%s", forItem(itemIdx, v))
					}
				}
				break
			}
			j.ID = id
			j.Pipeline = &mj.PipelineRef{ID: p.ID, Step: name, Intermediate: s.intermediate()}
			if itemIdx >= 0 {
				j.Pipeline.Item = &itemIdx
			}
			for _, r := range refs[name] {
				for _, dep := range producersOf(r, i, ids) {
					if !slices.Contains(j.Awaits, dep) {
						j.Awaits = append(j.Awaits, dep)
					}
				}
			}
			slices.Sort(j.Awaits)
			labels[id] = stepRefPrefix + name
			if itemIdx >= 0 {
				labels[id] += "[" + strconv.Itoa(itemIdx) + "]"
			}
			jobs[name] = append(jobs[name], j)
		}
		p.Steps = append(p.Steps, mj.PipelineStep{Name: name, Jobs: ids[name], Items: s.ForEach, Needs: needs[name], Intermediate: s.intermediate()})
	}
	if len(problems) > 0 {
		return nil, validationError(problems)
	}
	// Producers before the steps that take their outputs: a job is stored
	// only after every job it awaits (the awaiter fails a job whose awaited
	// job does not exist).
	mj.OrderSteps(p.Steps)
	for _, s := range p.Steps {
		p.Plan = append(p.Plan, jobs[s.Name]...)
	}
	return &plannedPipeline{p: p, labels: labels}, nil
}

func forItem(i int, msg string) string {
	if i < 0 {
		return msg
	}
	return fmt.Sprintf("for_each[%d]: %s", i, msg)
}

// checkMetadata is newJob's check of metadata, "" when fine.
func checkMetadata(m map[string]string) string {
	size := 0
	for k, v := range m {
		size += mj.StoredLen(k) + mj.StoredLen(v)
	}
	switch {
	case len(m) > mj.MaxMetadataKeys:
		return fmt.Sprintf("%d keys; at most %d", len(m), mj.MaxMetadataKeys)
	case size > mj.MaxMetadataBytes:
		return fmt.Sprintf("keys and values hold %s; at most %d bytes in all", storedBytes(size), mj.MaxMetadataBytes)
	}
	return ""
}

// jobInputs counts the inputs each job of step s takes: one per entry, and one
// per item for an entry step:<step>[*]/<output>.
func jobInputs(s *stepRequest, steps map[string]*stepRequest) int {
	n := 0
	for _, v := range s.InputFiles {
		if m := stepRefRe.FindStringSubmatch(v); m != nil && m[2] == "*" && steps[m[1]] != nil {
			n += max(len(steps[m[1]].ForEach), 1)
		} else {
			n++
		}
	}
	return n
}

// patternCache compiles each output pattern a plan meets once.
type patternCache map[string]*regexp.Regexp

func (c patternCache) get(pattern string) *regexp.Regexp {
	re, ok := c[pattern]
	if !ok {
		re = mj.OutputPattern(pattern)
		c[pattern] = re
	}
	return re
}

// parseStepRef parses input value v of step name; msg says what is wrong.
func parseStepRef(v, name string, steps map[string]*stepRequest, pc patternCache) (stepRef, string) {
	m := stepRefRe.FindStringSubmatch(v)
	if m == nil {
		return stepRef{}, fmt.Sprintf("%q is not a reference to another step's output: write step:<step>/<output>, step:<step>[*]/<output> for every item of a step with for_each, or step:<step>[<n>]/<output> for one", mj.Clip(v, 64))
	}
	r := stepRef{step: m[1], index: m[2], output: m[3]}
	prod, ok := steps[r.step]
	switch {
	case !ok || prod == nil:
		return r, fmt.Sprintf("no step %q in this pipeline (steps: %s)", r.step, strings.Join(sortedKeys(steps), ", "))
	case r.step == name:
		return r, "a step cannot take its own output"
	}
	fanned := prod.ForEach != nil
	switch {
	case r.index == "" && fanned:
		return r, fmt.Sprintf("step %s runs once per item of its for_each: write step:%s[*]/%s for every item's, step:%s[<n>]/%s for one, or step:%s[${index}]/%s for the item of the same index", r.step, r.step, r.output, r.step, r.output, r.step, r.output)
	case r.index != "" && !fanned:
		return r, fmt.Sprintf("step %s runs once (it has no for_each): write step:%s/%s", r.step, r.step, r.output)
	case r.index == "${index}":
		self := steps[name]
		if self.ForEach == nil {
			return r, "[${index}] pairs items of two steps with for_each; this step has none"
		}
		if len(self.ForEach) != len(prod.ForEach) {
			return r, fmt.Sprintf("[${index}] pairs items by index, but this step has %d items and step %s %d", len(self.ForEach), r.step, len(prod.ForEach))
		}
	case r.index != "" && r.index != "*":
		n, err := strconv.Atoi(r.index)
		if err != nil || n < 0 || n >= len(prod.ForEach) || r.index != strconv.Itoa(n) { // not +1, 01
			return r, fmt.Sprintf("[%s]: step %s has items 0 to %d", r.index, r.step, len(prod.ForEach)-1)
		}
	}
	if slices.Contains(prod.OutputFiles, r.output) && !strings.Contains(r.output, "%") {
		return r, "" // as the step writes it: each item's name (stepJob)
	}
	// Else a file of a pattern (seg_%03d.ts), which every item the
	// reference takes must make.
	items := []int{-1}
	perItem := strings.Contains(r.output, "${") || slices.ContainsFunc(prod.OutputFiles, func(o string) bool { return strings.Contains(o, "${") })
	switch n, err := strconv.Atoi(r.index); {
	case !perItem: // every item makes the same names: one check covers them
	case r.index == "*" || r.index == "${index}":
		items = make([]int, len(prod.ForEach))
		for k := range items {
			items[k] = k
		}
	case err == nil:
		items = []int{n}
	}
	for _, k := range items {
		if _, msg := refOutput(prod, r.step, r.output, k, pc); msg != "" {
			return r, msg
		}
	}
	return r, ""
}

// refOutput is the file that output (as a reference names it, placeholders
// included) stands for in item k (-1: none) of step, the producer prod; msg
// says why it is none that item makes: neither an entry of its output_files
// nor a file one of their patterns (%03d, %v) makes.
func refOutput(prod *stepRequest, step, output string, k int, pc patternCache) (name, msg string) {
	var item map[string]string
	if k >= 0 {
		item = prod.ForEach[k]
	}
	own := func(expr string) (string, bool, string) { return itemValue(expr, item, k, step) }
	name, err := expand(output, own)
	if err != "" {
		return "", "step " + step + "'s output " + output + ": " + err
	}
	var made []string
	for _, o := range prod.OutputFiles {
		if o, err = expand(o, own); err != "" {
			continue // refused on the producing step
		}
		if !strings.Contains(name, "%") && (o == name || strings.Contains(o, "%") && mj.ValidOutputName(name) && pc.get(o).MatchString(name)) {
			return name, ""
		}
		made = append(made, o)
	}
	which := "step " + step
	if k >= 0 {
		which = fmt.Sprintf("item %d of step %s", k, step)
	}
	return "", fmt.Sprintf("%s does not list %q among its output_files (%s), nor a pattern that makes it (as seg_%%03d.ts makes seg_001.ts)", which, name, strings.Join(made, ", "))
}

// producersOf are the ids of the jobs ref r of item i takes outputs of.
func producersOf(r stepRef, i int, ids map[string][]string) []string {
	switch r.index {
	case "":
		return ids[r.step][:1]
	case "*":
		return ids[r.step]
	case "${index}":
		return ids[r.step][i : i+1]
	}
	n, _ := strconv.Atoi(r.index)
	return ids[r.step][n : n+1]
}

// findCycle returns the steps of a cycle of needs (first repeated last), nil
// when there is none.
func findCycle(names []string, needs map[string][]string) []string {
	state := map[string]int{} // 1: on the path, 2: done
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		switch state[n] {
		case 1:
			at := slices.Index(path, n)
			return append(slices.Clone(path[at:]), n)
		case 2:
			return nil
		}
		state[n] = 1
		path = append(path, n)
		for _, d := range needs[n] {
			if c := visit(d); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[n] = 2
		return nil
	}
	for _, n := range names {
		if c := visit(n); c != nil {
			return c
		}
	}
	return nil
}

// stepJob is the job body of item i (-1: a step without for_each) of step
// name: placeholders substituted, step references turned into references to
// the planned jobs. field and msg say what is wrong, relative to the step.
func stepJob(s *stepRequest, name string, item map[string]string, i int, refs map[string]stepRef, steps map[string]*stepRequest, ids map[string][]string) (req *createRequest, field, msg string) {
	r := s.createRequest
	own := func(expr string) (string, bool, string) { return itemValue(expr, item, i, name) }
	// Inputs: a step reference names the planned job; every item of a step
	// ([*]) is one input per item, <input>_<n>.
	r.InputFiles = map[string]string{}
	fanIn := map[string][]map[string]string{} // input -> the producing items
	for _, in := range sortedKeys(s.InputFiles) {
		ref, ok := refs[in]
		if !ok {
			v, err := expand(s.InputFiles[in], own)
			if err != "" {
				return nil, "input_files." + in, err
			}
			r.InputFiles[in] = v
			continue
		}
		prod := steps[ref.step]
		producers := producersOf(ref, max(i, 0), ids)
		first := 0
		switch ref.index {
		case "${index}":
			first = i
		case "", "*":
		default:
			first, _ = strconv.Atoi(ref.index)
		}
		for k, id := range producers {
			var pitem map[string]string
			if prod.ForEach != nil {
				pitem = prod.ForEach[first+k]
			}
			// As the producer's item names it.
			out, err := expand(ref.output, func(expr string) (string, bool, string) { return itemValue(expr, pitem, first+k, ref.step) })
			if err != "" {
				return nil, "input_files." + in, "step " + ref.step + "'s output " + ref.output + ": " + err
			}
			key := in
			if ref.index == "*" {
				key = in + "_" + strconv.Itoa(k)
				if _, clash := s.InputFiles[key]; clash {
					return nil, "input_files." + in, fmt.Sprintf("takes every item of step %s as inputs %s_0 to %s_%d, but input %s is declared too", ref.step, in, in, len(producers)-1, key)
				}
			}
			r.InputFiles[key] = mj.JobRefPrefix + id + "/" + out
		}
		if ref.index == "*" {
			fanIn[in] = prod.ForEach
		}
	}
	r.OutputFiles = make([]string, len(s.OutputFiles))
	for k, o := range s.OutputFiles {
		v, err := expand(o, own)
		if err != "" {
			return nil, fmt.Sprintf("output_files[%d]", k), err
		}
		r.OutputFiles[k] = v
	}
	if s.OutputFiles == nil {
		r.OutputFiles = nil // newJob says what to write
	}
	cmds, cmdField := s.FFmpegCommands, "ffmpeg_commands"
	if len(cmds) == 0 && s.FFmpegCommand != "" {
		cmds, cmdField = []string{s.FFmpegCommand}, "ffmpeg_command"
	}
	r.FFmpegCommands, r.FFmpegCommand = make([]string, len(cmds)), ""
	for k, c := range cmds {
		f := fmt.Sprintf("%s[%d]", cmdField, k)
		if cmdField == "ffmpeg_command" {
			f = cmdField
		}
		// One pass, so that no value written in is read again as a
		// placeholder: every item of a fan-in (${each:…}, ${count:…}), and
		// this step's own item.
		c, err := expand(c, func(expr string) (string, bool, string) {
			if v, ok, err := fanInValue(expr, fanIn); ok || err != "" {
				return v, ok, err
			}
			return own(expr)
		})
		if err != "" {
			return nil, f, err
		}
		r.FFmpegCommands[k] = c
	}
	if s.WebhookURL != "" {
		v, err := expand(s.WebhookURL, own)
		if err != "" {
			return nil, "webhook_url", err
		}
		r.WebhookURL = v
	}
	if len(s.Metadata) > 0 {
		r.Metadata = make(map[string]string, len(s.Metadata))
		for k, v := range s.Metadata {
			e, err := expand(v, own)
			if err != "" {
				return nil, "metadata." + k, err
			}
			r.Metadata[k] = e
		}
	}
	return &r, "", ""
}

// itemValue is placeholder expr for item i (-1: none) of step: ${item.<key>}
// and ${index}; ok false for any other.
func itemValue(expr string, item map[string]string, i int, step string) (string, bool, string) {
	key, isItem := strings.CutPrefix(expr, "item.")
	if !isItem && expr != "index" {
		return "", false, ""
	}
	if i < 0 {
		return "", true, fmt.Sprintf("${%s}: step %s has no for_each to take it from", expr, step)
	}
	if !isItem {
		return strconv.Itoa(i), true, ""
	}
	v, ok := item[key]
	if !ok {
		return "", true, fmt.Sprintf("${%s}: item %d of step %s has no key %q (it has: %s)", expr, i, step, key, strings.Join(slices.Sorted(maps.Keys(item)), ", "))
	}
	return v, true, ""
}

// fanInValue is placeholder expr over the inputs that take every item of a
// step (fanIn: input -> that step's items): ${count:<input>}, how many; and
// ${each:<input>:<text>}, text once per item, joined by spaces, with
// {{<input>}} in it naming that item's input and ${index} and ${item.<key>}
// the producing item's.
func fanInValue(expr string, fanIn map[string][]map[string]string) (string, bool, string) {
	kind, rest, _ := strings.Cut(expr, ":")
	if kind != "count" && kind != "each" {
		return "", false, ""
	}
	in, text, _ := strings.Cut(rest, ":")
	items, ok := fanIn[in]
	if !ok {
		return "", true, fmt.Sprintf("${%s:%s…}: no input %q takes every item of a step (write it as step:<step>[*]/<output>)", kind, in, in)
	}
	if kind == "count" {
		if text != "" {
			return "", true, fmt.Sprintf("${count:%s} takes no text", in)
		}
		return strconv.Itoa(len(items)), true, ""
	}
	parts := make([]string, len(items))
	for k, item := range items {
		t := strings.ReplaceAll(text, "{{"+in+"}}", "{{"+in+"_"+strconv.Itoa(k)+"}}")
		v, err := expand(t, func(expr string) (string, bool, string) {
			if strings.HasPrefix(expr, "each:") || strings.HasPrefix(expr, "count:") {
				return "", true, "${each:…} cannot hold another ${each:…} or ${count:…}"
			}
			return itemValue(expr, item, k, "the input's")
		})
		if err != "" {
			return "", true, err
		}
		parts[k] = v
	}
	return strings.Join(parts, " "), true, ""
}

// expand replaces each ${expr} of s by fn's value (braces inside expr must
// balance: {{input}} may appear in it), in one pass: a value is not read
// again. $${ is a literal ${. An expr fn does not know (ok false) is refused.
func expand(s string, fn func(expr string) (v string, ok bool, err string)) (string, string) {
	if !strings.Contains(s, "${") {
		return s, ""
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			depth, end := 1, -1
			for k := i + 2; k < len(s); k++ {
				if s[k] == '{' {
					depth++
				} else if s[k] == '}' {
					if depth--; depth == 0 {
						end = k
						break
					}
				}
			}
			if end < 0 {
				return "", fmt.Sprintf("%q has no closing }: placeholders are ${item.<key>}, ${index}, ${count:<input>} and ${each:<input>:<text>}; write $${ for a literal ${", mj.Clip(s[i:], 32))
			}
			expr := s[i+2 : end]
			v, ok, err := fn(expr)
			switch {
			case err != "":
				return "", err
			case ok:
				b.WriteString(v)
			default:
				return "", fmt.Sprintf("${%s} is not a placeholder: use ${item.<key>} or ${index} in a step with for_each, ${count:<input>} or ${each:<input>:<text>} over an input that takes every item of a step; write $${ for a literal ${", mj.Clip(expr, 32))
			}
			i = end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), ""
}
