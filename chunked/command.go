package chunked

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Refusal says why a command cannot be split: what (an option or filter, as
// written) and why, in words for the user.
type Refusal struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

func (r *Refusal) Error() string {
	return "cannot split this command: " + r.What + " " + r.Why
}

func refuse(what, why string) error { return &Refusal{What: what, Why: why} }

// Opt is one option as written: -name[:spec] and its value, if it takes one.
type Opt struct {
	Name     string // without "-" or the stream specifier: "c", "b", "filter"
	Spec     string // the stream specifier: "v", "a:0", ""
	Word     string // as written: "-c:v"
	Value    string
	HasValue bool
}

func (o Opt) words() []string {
	if o.HasValue {
		return []string{o.Word, o.Value}
	}
	return []string{o.Word}
}

// Command is a command that Parse accepted: one input, one output, the video
// encoded by one of the encoders chunked encoding knows.
type Command struct {
	Global     []Opt  // options that apply to the whole run (-y, -hide_banner...)
	InputOpts  []Opt  // the input's options, before -i
	Input      string // the source: inputs/<name>
	OutputOpts []Opt  // the output's options
	Output     string // outputs/<name>
	// Encoder is the video encoder (-c:v): one of Encoders.
	Encoder string
	// VideoFilter is the video filter graph (-vf, -filter:v), "" if none.
	VideoFilter string
	// Maps are the -map values; none means ffmpeg's default selection.
	Maps []string
}

// Encoders are the video encoders a chunk can be encoded with: each gets a
// closed keyframe at the chunk's start (encoderArgs).
var Encoders = []string{"libx264", "libx265", "libsvtav1", "libvpx-vp9"}

// encoderCodecs are the codecs Encoders write (ffprobe's codec_name).
var encoderCodecs = map[string]string{"libx264": "h264", "libx265": "hevc", "libsvtav1": "av1", "libvpx-vp9": "vp9"}

// Codec is the codec the command's encoder writes (PacketFilter's name).
func (c *Command) Codec() string { return encoderCodecs[c.Encoder] }

// valueBools are boolean options that take a value (-autorotate 0) but whose
// -noX form takes none (command/options_gen.go: optArg | optBool).
var valueBools = map[string]bool{"autorotate": true, "autoscale": true}

// boolOptions are ffmpeg's main options that take no value (ffmpeg 5.1's
// table, command/options_gen.go); -noX is X set to 0. Every other option,
// AVOptions included, takes the next word.
var boolOptions = map[string]bool{
	"accurate_seek": true, "an": true, "auto_conversion_filters": true, "benchmark": true,
	"benchmark_all": true, "bitexact": true, "copy_unknown": true, "copyinkf": true, "copyts": true,
	"debug_ts": true, "dn": true, "dump": true, "find_stream_info": true, "fix_sub_duration": true,
	"force_fps": true, "hex": true, "hide_banner": true, "ignore_unknown": true, "n": true,
	"psnr": true, "qphist": true, "re": true, "recast_media": true, "report": true, "shortest": true,
	"sn": true, "start_at_zero": true, "stats": true, "stdin": true, "vn": true, "vstats": true,
	"xerror": true, "y": true,
}

// globalOptions apply to the whole run wherever they are written.
var globalOptions = map[string]bool{
	"y": true, "n": true, "hide_banner": true, "loglevel": true, "v": true, "stats": true,
	"stdin": true, "benchmark": true, "benchmark_all": true, "filter_complex": true, "lavfi": true,
	"filter_complex_threads": true, "filter_threads": true, "copyts": true, "start_at_zero": true,
	"copytb": true, "vsync": true, "xerror": true, "debug_ts": true, "abort_on": true,
	"max_error_rate": true, "stats_period": true, "report": true, "ignore_unknown": true,
	"copy_unknown": true, "cpuflags": true, "recast_media": true, "init_hw_device": true,
	"filter_hw_device": true, "vstats": true, "vstats_file": true, "dts_delta_threshold": true,
	"dts_error_threshold": true, "qphist": true, "psnr": true, "hex": true, "dump": true,
	"auto_conversion_filters": true, "timelimit": true, "max_alloc": true,
}

// aliases maps ffmpeg's short forms to the option and stream type they stand for.
var aliases = map[string][2]string{
	"vcodec": {"c", "v"}, "acodec": {"c", "a"}, "scodec": {"c", "s"}, "dcodec": {"c", "d"},
	"codec": {"c", ""}, "vf": {"filter", "v"}, "af": {"filter", "a"}, "vframes": {"frames", "v"},
	"aframes": {"frames", "a"}, "dframes": {"frames", "d"}, "vtag": {"tag", "v"}, "atag": {"tag", "a"},
}

// frameParams are encoder parameters (-x264-params, -x265-params,
// -svtav1-params) that name frames by number or give the encoder the whole
// file's length or a file of per-frame data: why each cannot be split.
var frameParams = map[string]string{
	"zones":               "applies settings to ranges of frame numbers",
	"zonefile":            "applies settings to ranges of frame numbers",
	"qpfile":              "forces frame types and QPs by frame number",
	"frames":              "gives the number of frames to encode",
	"chunk-start":         "starts a chunk at a frame number",
	"chunk-end":           "ends a chunk at a frame number",
	"dhdr10-info":         "reads HDR10+ metadata per frame number",
	"dolby-vision-rpu":    "reads Dolby Vision metadata per frame number",
	"analysis-load":       "reads a previous encode's analysis per frame number",
	"analysis-save":       "writes the encode's analysis per frame number",
	"analysis-reuse-file": "reads a previous encode's analysis per frame number",
	"vbv-end":             "sets the VBV buffer at the file's last frames",
	"vbv-end-fr-adj":      "sets the VBV buffer at the file's last frames",
}

// timeBSFs are bitstream filters whose result depends on a packet count,
// time or a random sequence.
var timeBSFs = map[string]string{
	"setts": "rewrites timestamps with expressions over packet numbers and times (N, STARTPTS...)",
	"noise": "damages or drops packets at random or by packet number",
}

// splitMuxers write their output as pieces over time; a chunk cannot.
var splitMuxers = map[string]string{
	"segment": "cuts the output into segments by time", "ssegment": "cuts the output into segments by time",
	"stream_segment": "cuts the output into segments by time", "hls": "cuts the output into HLS segments by time",
	"dash": "cuts the output into DASH segments by time", "tee": "writes several outputs", "fifo": "writes through a queue to another muxer",
	"image2": "writes one file per frame, numbered from each chunk's start", "image2pipe": "writes frames to a pipe",
	"null": "writes nothing: there is no file to stitch", "webm_chunk": "cuts the output into chunks by time",
	"smoothstreaming": "cuts the output into fragments by time",
}

var mapRe = regexp.MustCompile(`^-?0(:([vVasdt])(:(\d+))?|:(\d+))?\??$`)

// Check tells whether argv (a command as command.Prepare leaves it) can be
// encoded in chunks; the error is a *Refusal naming what prevents it.
func Check(argv []string) error {
	_, err := Parse(argv)
	return err
}

// Parse reads argv (command.Prepare's output, "ffmpeg" dropped) as ffmpeg's
// command-line parser does and checks that it can be encoded in chunks.
func Parse(argv []string) (*Command, error) {
	c := &Command{}
	var pending []Opt
	inputs, outputs := 0, 0
	for i := 0; i < len(argv); i++ {
		w := argv[i]
		if w == "-" || !strings.HasPrefix(w, "-") {
			outputs++
			if outputs > 1 {
				return nil, refuse(fmt.Sprintf("output %q", w), "is a second output: a chunked job has one input and one output; write the other output in a job of its own")
			}
			if inputs == 0 {
				return nil, refuse(fmt.Sprintf("output %q", w), "comes before any -i input")
			}
			c.Output, c.OutputOpts, pending = w, pending, nil
			continue
		}
		name, spec, _ := strings.Cut(w[1:], ":")
		o := Opt{Name: name, Spec: spec, Word: w}
		if a, ok := aliases[name]; ok {
			o.Name = a[0]
			if o.Spec == "" {
				o.Spec = a[1]
			} else if a[1] != "" {
				o.Spec = a[1] + ":" + o.Spec
			}
		}
		if o.Name == "filter" && o.Spec == "" {
			o.Spec = "v" // -filter without a specifier: the video's (audio would fail on a video graph)
		}
		noValue := boolOptions[name] || (strings.HasPrefix(name, "no") && (boolOptions[name[2:]] || valueBools[name[2:]]))
		if !noValue {
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("option %s needs a value", w)
			}
			i++
			o.Value, o.HasValue = argv[i], true
		}
		base := strings.TrimPrefix(o.Name, "no")
		if noValue && globalOptions[base] || !noValue && globalOptions[o.Name] {
			c.Global = append(c.Global, o)
			continue
		}
		if o.Name == "i" {
			inputs++
			if inputs > 1 {
				return nil, refuse(fmt.Sprintf("-i %s", o.Value), "is a second input: a filter graph or mapping over a second timeline cannot be split (each chunk sees only its own part of the first input); chunked encoding takes one video input")
			}
			if outputs > 0 {
				return nil, refuse(fmt.Sprintf("-i %s", o.Value), "comes after the output")
			}
			c.Input, c.InputOpts, pending = o.Value, pending, nil
			continue
		}
		pending = append(pending, o)
	}
	switch {
	case inputs == 0:
		return nil, fmt.Errorf("the command has no input (-i)")
	case outputs == 0:
		return nil, fmt.Errorf("the command has no output file")
	case len(pending) > 0:
		return nil, refuse(fmt.Sprintf("option %s", pending[0].Word), "comes after the output, where ffmpeg ignores it")
	}
	if err := c.checkGlobal(); err != nil {
		return nil, err
	}
	if err := c.checkInput(); err != nil {
		return nil, err
	}
	if err := c.checkOutput(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Command) checkGlobal() error {
	for _, o := range c.Global {
		switch o.Name {
		case "filter_complex", "lavfi":
			return refuse(fmt.Sprintf("-%s %q", o.Name, o.Value), "is a complex filter graph: chunked encoding takes the video's filters as -vf (one input, one output, applied to each chunk); write a graph over the one video stream as -vf")
		case "copyts", "start_at_zero", "copytb":
			return refuse("-"+o.Name, "changes how timestamps are carried: chunked encoding keeps the source's timestamps itself; drop it")
		case "vsync":
			if err := checkFPSMode(o); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Command) checkInput() error {
	if c.Output == "-" {
		return refuse("output \"-\"", "writes to stdout: the stitched file needs a name; write outputs/<name>")
	}
	for _, o := range c.InputOpts {
		switch o.Name {
		case "ss", "sseof":
			return refuse(o.Word+" "+o.Value, "on the input starts the encode at a time: the plan cuts the whole source; trim the source in a job of its own first (-c copy), then split that")
		case "t", "to":
			return refuse(o.Word+" "+o.Value, "on the input ends the encode at a time: the plan cuts the whole source; trim the source in a job of its own first (-c copy), then split that")
		case "itsoffset", "itsscale":
			return refuse(o.Word+" "+o.Value, "shifts or scales the input's timestamps, which the plan and the stitch take from the source as it is")
		case "stream_loop":
			return refuse(o.Word+" "+o.Value, "loops the input: a loop is one timeline that chunks of the source cannot see")
		case "r", "framerate":
			if o.Name == "r" || o.Spec == "" || specType(o.Spec) == 'v' {
				return refuse(o.Word+" "+o.Value, "on the input re-times every frame from a frame count, which restarts in each chunk")
			}
		case "f":
			if strings.EqualFold(o.Value, "lavfi") {
				return refuse("-f lavfi -i "+c.Input, "is a generated input: there is no source file to split")
			}
		case "skip_frame":
			return refuse(o.Word+" "+o.Value, "drops frames at decoding, which the plan counts")
		case "discard":
			return refuse(o.Word+" "+o.Value, "drops packets at demuxing, which the plan counts")
		}
	}
	return nil
}

func (c *Command) checkOutput() error {
	var encoder string
	for _, o := range c.OutputOpts {
		w := o.Word + " " + o.Value
		if !o.HasValue {
			w = o.Word
		}
		switch o.Name {
		case "ss":
			return refuse(w, "on the output starts the encode at a time: each chunk would skip its own first "+o.Value+" s; trim the source in a job of its own first (-c copy), then split that")
		case "t":
			return refuse(w, "on the output stops the encode after a duration: each chunk would stop "+o.Value+" s after its own start; trim the source in a job of its own first (-c copy), then split that")
		case "to":
			return refuse(w, "on the output stops the encode at a time, which each chunk would read on its own timeline; trim the source in a job of its own first (-c copy), then split that")
		case "frames":
			return refuse(w, "stops after a number of frames: each chunk would stop after its own "+o.Value+"; trim the source in a job of its own first, then split that")
		case "fs":
			return refuse(w, "limits the file's size: each chunk would stop at its own limit")
		case "pass", "passlogfile":
			return refuse(w, "is two-pass rate control: its first pass reads the whole file, which no chunk has; use CRF (with -maxrate and -bufsize to cap the bitrate)")
		case "r", "fpsmax":
			if appliesToVideo(o.Spec) {
				return refuse(w, "on the output converts the frame rate by dropping or duplicating frames along the whole timeline: each chunk would do it from its own start; convert the frame rate in a job of its own, or drop it")
			}
		case "fps_mode":
			if err := checkFPSMode(o); err != nil {
				return err
			}
		case "enc_time_base":
			if appliesToVideo(o.Spec) && o.Value != "-1" {
				return refuse(w, "sets the encoder's time base, and chunked encoding encodes each chunk in the source's (-enc_time_base -1) to keep its timestamps: it would be dropped; drop it")
			}
		case "shortest":
			return refuse(w, "ends the output with its shortest stream, which only the whole file knows (chunks carry no audio); trim the source in a job of its own first")
		case "force_key_frames":
			if strings.HasPrefix(o.Value, "expr:") || o.Value == "source" || strings.Contains(o.Value, "chapters") {
				return refuse(w, "places keyframes by an expression over frame numbers, the source's keyframes or chapters, which restart in each chunk; give times (-force_key_frames 0,2,4) instead")
			}
		case "f":
			if why, bad := splitMuxers[strings.ToLower(o.Value)]; bad {
				return refuse(w, why+": encode the file in chunks, then package it in a job of its own")
			}
		case "hls_time", "hls_list_size", "segment_time", "segment_times", "seg_duration":
			return refuse(w, "cuts the output by time: encode the file in chunks, then package it in a job of its own")
		case "map":
			if err := checkMap(o.Value); err != nil {
				return err
			}
			c.Maps = append(c.Maps, o.Value)
		case "c":
			if appliesToVideo(o.Spec) {
				encoder = o.Value
			}
		case "filter":
			if specType(o.Spec) == '?' {
				// -filter:0 may be the video's graph, and the chunks' encodes
				// take only -vf/-filter:v: it would be dropped silently.
				return refuse(w, "selects its stream by index or property, which may be the video: write the video's graph as -vf or -filter:v, the audio's as -af")
			}
			if specType(o.Spec) == 'v' || o.Spec == "" {
				if err := checkGraph(o.Word, o.Value); err != nil {
					return err
				}
				c.VideoFilter = o.Value
			}
		case "x264-params", "x265-params", "svtav1-params", "x264opts":
			for _, kv := range splitParams(o.Value) {
				k := strings.ToLower(strings.ReplaceAll(kv[0], "_", "-"))
				if k == "pass" || k == "passes" || k == "stats" || k == "slow-firstpass" {
					return refuse(w, "is two-pass rate control ("+kv[0]+"): its first pass reads the whole file, which no chunk has; use CRF (with vbv-maxrate and vbv-bufsize to cap the bitrate)")
				}
				if why, bad := frameParams[k]; bad {
					return refuse(w, "sets "+kv[0]+", which "+why+": each chunk's encoder counts frames from its own start")
				}
			}
		case "bsf", "vbsf":
			if o.Name == "bsf" && !appliesToVideo(o.Spec) {
				break
			}
			for _, f := range strings.Split(o.Value, ",") {
				name, _, _ := strings.Cut(f, "=")
				if why, bad := timeBSFs[strings.TrimSpace(name)]; bad {
					return refuse(w, "runs the bitstream filter "+name+", which "+why+": each chunk's encode runs it from its own start")
				}
			}
		case "vn":
			return refuse(w, "drops the video: there is nothing to encode in chunks")
		}
	}
	ext := strings.ToLower(path.Ext(c.Output))
	if ext == ".m3u8" || ext == ".mpd" {
		return refuse(fmt.Sprintf("output %q", c.Output), "is a segmented stream (HLS/DASH), cut by time: encode the file in chunks, then package it in a job of its own")
	}
	if strings.Contains(c.Output, "%") {
		return refuse(fmt.Sprintf("output %q", c.Output), "is a numbered sequence of files: each chunk would number its own from the start")
	}
	if encoder == "" {
		return refuse("the command", "names no video encoder: write -c:v with one of "+strings.Join(Encoders, ", "))
	}
	if encoder == "copy" {
		return refuse("-c:v copy", "copies the video: there is nothing to encode in chunks")
	}
	ok := false
	for _, e := range Encoders {
		ok = ok || e == encoder
	}
	if !ok {
		return refuse("-c:v "+encoder, "is not an encoder chunked encoding knows how to give a closed keyframe at each chunk's start; use one of "+strings.Join(Encoders, ", "))
	}
	c.Encoder = encoder
	if b, a := c.Reach(); b+a > 0 {
		if _, ok := appendFilter(c.VideoFilter, "null"); !ok {
			return refuse("-vf "+c.VideoFilter, "reads neighbouring frames, and chunked encoding cannot find the graph's output to drop the frames around each chunk after it (its pre- and post-roll): end the graph with a chain that has no output label")
		}
	}
	return nil
}

// Reach is how many frames before and after each frame the video filters
// read (yadif: one each way): the pre- and post-roll each chunk is encoded
// with (Source.Roll).
func (c *Command) Reach() (before, after int) { return graphReach(c.VideoFilter) }

func checkFPSMode(o Opt) error {
	switch strings.ToLower(o.Value) {
	case "passthrough", "0", "vfr", "2", "auto", "-1":
		return nil
	}
	return refuse(o.Word+" "+o.Value, "drops or duplicates frames to a constant rate along the whole timeline: each chunk would do it from its own start; drop it (timestamps are kept as the source has them)")
}

// checkMap accepts the maps of one input's streams by type and index; only the
// first video stream can be chunked.
func checkMap(v string) error {
	if strings.HasPrefix(v, "[") {
		return refuse("-map "+v, "maps a filter graph's output: chunked encoding takes the video's filters as -vf")
	}
	m := mapRe.FindStringSubmatch(v)
	if m == nil {
		return refuse("-map "+v, "is not a map of the input's streams by type (0:v, 0:a:1, 0:s) or index (0:1): chunked encoding takes one input, and only such maps")
	}
	if strings.HasPrefix(v, "-") {
		if m[2] == "v" || m[2] == "V" {
			return refuse("-map "+v, "removes video: only the first video stream is chunked, and it must be kept")
		}
		return nil
	}
	if (m[2] == "v" || m[2] == "V") && m[4] != "" && m[4] != "0" {
		return refuse("-map "+v, "maps a video stream other than the first: only the first video stream is chunked")
	}
	return nil
}

// specType is the stream type a stream specifier selects: 'v', 'a', 's', 'd',
// 't', 'V', 0 when it selects all streams, '?' when it selects by index or
// another property (it may be a video stream).
func specType(spec string) byte {
	if spec == "" {
		return 0
	}
	t, _, _ := strings.Cut(spec, ":")
	if len(t) == 1 && strings.Contains("vasdtV", t) {
		if t == "V" {
			return 'v'
		}
		return t[0]
	}
	return '?'
}

func appliesToVideo(spec string) bool {
	t := specType(spec)
	return t == 0 || t == 'v' || t == '?'
}

// splitParams splits an encoder's key=value:key=value list.
func splitParams(v string) [][2]string {
	var kvs [][2]string
	for _, p := range strings.Split(v, ":") {
		if p == "" {
			continue
		}
		k, val, _ := strings.Cut(p, "=")
		kvs = append(kvs, [2]string{k, val})
	}
	return kvs
}
