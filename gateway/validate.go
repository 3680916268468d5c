package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/config"
)

// createRequest is the body of POST /api/ffmpeg. Unknown fields are ignored, as
// clients written for other versions of the API may send more.
type createRequest struct {
	InputFiles     map[string]string `json:"input_files"`
	OutputFiles    []string          `json:"output_files"`
	FFmpegCommands []string          `json:"ffmpeg_commands"`
	FFmpegCommand  string            `json:"ffmpeg_command"`
	WebhookURL     string            `json:"webhook_url"`
	Machine        string            `json:"machine"`
	TimeoutSeconds *int              `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata"`
	// OutputDestinations and KeepOutputs: where outputs also go, and whether the
	// service keeps its own copy (destinations.go).
	OutputDestinations map[string]string `json:"output_destinations,omitempty"`
	KeepOutputs        *bool             `json:"keep_outputs,omitempty"`
	// Parallel asks for chunked encoding (parallel.go).
	Parallel *parallelRequest `json:"parallel,omitempty"`
}

// decodeCreate parses a create body whatever its Content-Type says (VGF's
// TypeScript SDK sends JSON as text/plain).
func decodeCreate(body []byte) (*createRequest, error) {
	var req createRequest
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, mj.Errorf(mj.EValidation, "request body is empty; send a JSON object")
	}
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return nil, mj.Errorf(mj.EValidation, "request body must be a JSON object, not a JSON %s", te.Value)
		}
		if errors.As(err, &te) {
			e := mj.Errorf(mj.EValidation, "%s must be %s, not a JSON %s", te.Field, jsonType(te.Field, te.Type.String()), te.Value)
			e.Details = map[string]string{te.Field: "wrong type"}
			return nil, e
		}
		return nil, mj.Errorf(mj.EValidation, "request body is not valid JSON: %v", err)
	}
	return &req, nil
}

// jsonType names in JSON's words what the decoder wanted at field, which it
// reports as goType: a container's element type when an element is wrong
// ({"input_files": {"v": 5}} is field input_files, type string).
func jsonType(field, goType string) string {
	last := field[strings.LastIndex(field, ".")+1:]
	switch {
	case goType == "string" && (last == "input_files" || last == "metadata" || last == "output_destinations"):
		return "an object of strings (each value a string)"
	case goType == "string" && (last == "output_files" || last == "ffmpeg_commands"):
		return "an array of strings (each element a string)"
	case strings.HasPrefix(goType, "map"):
		return "an object of strings"
	case strings.HasPrefix(goType, "[]"):
		return "an array of strings"
	case goType == "int" || goType == "*int":
		return "an integer"
	case goType == "*bool" || goType == "bool": // the decoder names a pointer's element type
		return "true or false"
	case goType == "float64" || goType == "*float64":
		return "a number"
	case strings.Contains(goType, "."): // a struct: "parallel" is gateway.parallelRequest
		return "an object"
	}
	return "a string"
}

// newJob validates req against cfg and builds the job to store. Every problem is
// reported at once, keyed by its field path; nothing is stored on error.
func newJob(req *createRequest, cfg *config.Config, accountID string, now time.Time) (*mj.Job, error) {
	problems := map[string]string{}
	bad := func(field, format string, args ...any) { problems[field] = fmt.Sprintf(format, args...) }

	machine := req.Machine
	if machine == "" {
		machine = "cpu"
	}
	pool := cfg.Pool(machine)
	if pool == nil {
		bad("machine", "unknown machine %q; this server offers: %s", machine, poolNames(cfg))
	}

	// Every field stored in the job is bounded (see mediajobs' bounds.go): lengths
	// are counted as stored, JSON escapes included (mj.StoredLen).
	spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{}, AllowGPU: pool != nil && pool.GPUs() > 0, NoNVENC: noNVENC(cfg, pool),
		Unsandboxed: pool != nil && pool.Unsandboxed()}
	if max := cfg.Server.MaxInputs; len(req.InputFiles) > max {
		bad("input_files", "%d inputs; at most %d (server.max_inputs)", len(req.InputFiles), max)
	}
	for _, name := range sortedKeys(req.InputFiles) {
		field := "input_files." + name
		if !command.ValidName(name) {
			bad(field, "input name must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
		}
		if v := req.InputFiles[name]; mj.IsJobRef(v) {
			if _, _, ok := mj.ParseJobRef(v); !ok {
				bad(field, "%q is not a reference to another job's output: write job:<job id>/<output name>, as in job:3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b/out.mp4", mj.Clip(v, 64))
			}
		} else if err := checkURL(v); err != nil {
			bad(field, "%v", err)
		}
		spec.Inputs[name] = true
	}

	// An empty list is fine: an analysis job's result is what ffmpeg prints (its
	// logs, and the JSON of filters such as loudnorm in the job's analysis). A
	// missing list is more likely a mistake.
	switch {
	case req.OutputFiles == nil:
		bad("output_files", "list the output file names; [] for a job that writes no file (an analysis such as loudnorm's first pass)")
	case len(req.OutputFiles) > cfg.Server.MaxOutputs:
		bad("output_files", "%d outputs; at most %d (server.max_outputs)", len(req.OutputFiles), cfg.Server.MaxOutputs)
	}
	outputs := req.OutputFiles
	for i, name := range req.OutputFiles {
		field := fmt.Sprintf("output_files[%d]", i)
		switch {
		case !mj.ValidOutputName(name):
			bad(field, "output name %q must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}, optionally under one directory of the same form (hls/index.m3u8), "+
				"128 characters in all, with at most one counter such as %%03d in the file name and one %%v (an HLS variant) per part, as in stream_%%v/data%%03d.ts", name)
		case spec.Outputs[name]:
			bad(field, "output name %q is listed twice", name)
		case spec.Inputs[name]:
			bad(field, "%q is both an input and an output name", name)
		}
		spec.Outputs[name] = true
	}

	cmds, cmdField := req.FFmpegCommands, "ffmpeg_commands"
	if len(cmds) == 0 && req.FFmpegCommand != "" {
		cmds, cmdField = []string{req.FFmpegCommand}, "ffmpeg_command"
	}
	cmdBytes := 0
	for _, c := range cmds {
		cmdBytes += mj.StoredLen(c)
	}
	switch max := cfg.Server.MaxCommands; {
	case len(cmds) == 0:
		bad("ffmpeg_commands", "give at least one command (ffmpeg_commands, or ffmpeg_command for one)")
	case len(cmds) > max:
		bad("ffmpeg_commands", "%d commands; at most %d (server.max_commands)", len(cmds), max)
	case cmdBytes > cfg.Server.MaxCommandBytes:
		// Too long to be worth checking word by word.
		bad(cmdField, "the command text is %s; at most %d bytes in all (server.max_command_bytes)", storedBytes(cmdBytes), cfg.Server.MaxCommandBytes)
	default:
		for i, c := range cmds {
			if _, err := command.Prepare(c, spec); err != nil {
				bad(fmt.Sprintf("ffmpeg_commands[%d]", i), "%v", err)
			}
		}
	}

	if req.WebhookURL != "" {
		if err := checkURL(req.WebhookURL); err != nil {
			bad("webhook_url", "%v", err)
		}
	}

	timeout := 0
	if pool != nil {
		timeout = int(pool.DefaultTimeoutD / time.Second)
		max := int(pool.MaxTimeoutD / time.Second)
		if req.TimeoutSeconds != nil {
			timeout = *req.TimeoutSeconds
			if timeout < 1 || timeout > max {
				bad("timeout_seconds", "must be between 1 and %d on machine %q", max, machine)
			}
		}
	}

	size := 0
	for k, v := range req.Metadata {
		size += mj.StoredLen(k) + mj.StoredLen(v)
	}
	switch {
	case len(req.Metadata) > mj.MaxMetadataKeys:
		bad("metadata", "%d keys; at most %d", len(req.Metadata), mj.MaxMetadataKeys)
	case size > mj.MaxMetadataBytes:
		bad("metadata", "keys and values hold %s; at most %d bytes in all", storedBytes(size), mj.MaxMetadataBytes)
	}

	dests := checkDestinations(req, bad)

	if len(problems) > 0 {
		return nil, validationError(problems)
	}
	now = now.UTC()
	return &mj.Job{
		ID: uuid.NewString(), AccountID: accountID, Status: mj.StatusQueued,
		InputFiles: req.InputFiles, OutputNames: outputs, FFmpegCommands: cmds,
		WebhookURL: req.WebhookURL, Machine: machine, TimeoutSeconds: timeout, Metadata: req.Metadata,
		CreatedAt: now, QueuedAt: now, UpdatedAt: now,
		Destinations: dests, HasDestinations: dests != nil,
	}, nil
}

// noNVENC is command.Spec's NoNVENC for pool: empty when the pool has no GPUs or
// its GPUs have NVENC; otherwise why they cannot encode and what to use instead
// (the first pool whose GPUs can, or a CPU encoder).
func noNVENC(cfg *config.Config, pool *config.Pool) string {
	if pool == nil || pool.GPU == nil || pool.GPU.NVENC {
		return ""
	}
	msg := fmt.Sprintf("machine %q cannot encode with NVENC: %s", pool.Name, pool.GPU.NoNVENCWhy)
	fix := "no machine on this server has GPUs with NVENC, so use a CPU encoder such as libx264 or libx265"
	for _, p := range cfg.Pools {
		if p.CanEncode() {
			fix = fmt.Sprintf("use \"machine\": %q for NVENC encoders, or a CPU encoder such as libx264 or libx265 here", p.Name)
			break
		}
	}
	return msg + "; " + fix + " (decoding with -hwaccel cuda or *_cuvid and CUDA filters work on this machine)"
}

// validationError summarises problems in the message (first field first) and lists
// them all in details.
func validationError(problems map[string]string) *mj.Error {
	fields := sortedKeys(problems)
	msg := fields[0] + ": " + problems[fields[0]]
	if len(fields) > 1 {
		msg += fmt.Sprintf(" (and %d more problem(s), see details)", len(fields)-1)
	}
	return &mj.Error{Code: mj.EValidation, Message: msg, Details: problems}
}

// storedBytes says n bytes, as mj.StoredLen counts them.
func storedBytes(n int) string {
	return fmt.Sprintf("%d bytes (as stored: JSON escapes count, so &, < and > take 6 bytes each)", n)
}

// checkURL checks an input or webhook URL: an absolute http(s) URL of at most
// mj.MaxURLBytes.
func checkURL(raw string) error {
	if n := mj.StoredLen(raw); n > mj.MaxURLBytes {
		return fmt.Errorf("URL %q is %s; at most %d", mj.Clip(raw, 64), storedBytes(n), mj.MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL scheme %q is not allowed; use http or https", u.Scheme)
	}
	return nil
}

func poolNames(cfg *config.Config) string {
	names := make([]string, len(cfg.Pools))
	for i, p := range cfg.Pools {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
