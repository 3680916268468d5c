package chunked

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/mediajobs/mediajobs/command"
)

// A chunk is encoded on its own: a filter is safe to split only when its output
// for a frame depends on that frame alone. frameFilters are such filters;
// their arguments are still read for time and frame-number variables
// (timeVarRe), which restart in each chunk.
var frameFilters = toSet(`scale format noformat setsar setdar transpose hflip vflip pad crop null
copy colorspace colormatrix colorlevels colorchannelmixer colorbalance colorcontrast colorcorrect
colorize colortemperature chromakey colorkey colorhold huesaturation vibrance exposure curves lut
lutrgb lutyuv lut1d lut3d unsharp gblur boxblur smartblur avgblur sab convolution cas deband
edgedetect negate nlmeans removegrain super2xsai xbr hqx zscale tonemap setparams setrange setfield
swapuv shuffleplanes alphaextract premultiply unpremultiply split hstack vstack xstack overlay
blend maskedmerge alphamerge mergeplanes drawbox drawgrid drawtext eq hue rotate vignette geq
deblock dctdnoiz owdenoise spp fspp pp7 bilateral median kirsch prewitt roberts sobel scharr
erosion dilation inflate deflate lenscorrection perspective fillborders chromashift rgbashift
monochrome grayworld greyedge pseudocolor il fieldorder showinfo histeq scale_cuda hwupload
hwdownload hwupload_cuda`)

// timeFilters depend on their neighbours, on time or on frame numbers: why each
// cannot be split.
var timeFilters = map[string]string{
	"fade":             "fades by time or frame number: each chunk would fade at its own start",
	"trim":             "cuts by time or frame number: each chunk would be cut from its own start",
	"setpts":           "rewrites timestamps with an expression over frame numbers or times that restart in each chunk (only PTS-STARTPTS is safe)",
	"minterpolate":     "interpolates frames from their neighbours: the frames at each seam would differ, and the frame count with them",
	"tmix":             "mixes each frame with its neighbours: the frames at each seam would differ",
	"tblend":           "blends each frame with the one before: the first frame of each chunk would differ",
	"select":           "keeps frames by an expression (times, frame numbers, scene changes) that restarts in each chunk, and changes the frame count",
	"loop":             "loops frames of the whole timeline, which no chunk sees",
	"reverse":          "reverses the whole timeline, which no chunk sees",
	"fps":              "converts the frame rate along the whole timeline: each chunk would drop or duplicate frames from its own start",
	"framerate":        "converts the frame rate by blending neighbouring frames: each chunk would start its own cadence",
	"tpad":             "pads the timeline at its start or end: each chunk would be padded",
	"w3fdif":           "deinterlaces with the neighbouring frames, and pre-roll is not yet proven exact for it (it is for yadif and bwdif with mode=send_frame): the frames at each seam could differ",
	"estdif":           "deinterlaces with the neighbouring frames, and pre-roll is not yet proven exact for it (it is for yadif and bwdif with mode=send_frame): the frames at each seam could differ",
	"mcdeint":          "deinterlaces with the neighbouring frames, and pre-roll is not yet proven exact for it (it is for yadif and bwdif with mode=send_frame): the frames at each seam could differ",
	"nnedi":            "deinterlaces field by field in a cadence that restarts in each chunk",
	"hqdn3d":           "denoises recursively: each frame's result carries every frame before it (a reach without bound), so no pre-roll makes the first frames of each chunk equal one encode's; denoise with a spatial filter (nlmeans, bilateral...) or in a job of its own",
	"atadenoise":       "denoises over neighbouring frames, and pre-roll is not yet proven exact for it: the frames at each seam could differ",
	"tmedian":          "takes the median of neighbouring frames, and pre-roll is not yet proven exact for it: the frames at each seam could differ",
	"tmidequalizer":    "equalizes over neighbouring frames: the frames at each seam would differ",
	"deflicker":        "smooths brightness over neighbouring frames: the frames at each seam would differ",
	"normalize":        "smooths levels over the frames before: the first frames of each chunk would differ",
	"photosensitivity": "filters flashes over neighbouring frames: the frames at each seam would differ",
	"mpdecimate":       "drops frames by comparing neighbours: the choice restarts in each chunk, and the frame count with it",
	"decimate":         "drops frames in cycles that restart in each chunk",
	"framestep":        "keeps every Nth frame, counted from each chunk's start",
	"thumbnail":        "picks frames in batches that restart in each chunk",
	"telecine":         "applies a field cadence that restarts in each chunk",
	"detelecine":       "removes a field cadence that restarts in each chunk",
	"pullup":           "removes a field cadence over neighbouring frames",
	"fieldmatch":       "matches fields of neighbouring frames",
	"interlace":        "weaves pairs of frames, paired from each chunk's start",
	"tinterlace":       "weaves or splits frames in pairs counted from each chunk's start",
	"separatefields":   "splits frames into fields, doubling the frame count with times that restart in each chunk",
	"weave":            "weaves pairs of frames, paired from each chunk's start",
	"doubleweave":      "weaves pairs of frames, paired from each chunk's start",
	"dejudder":         "re-times frames in a cadence that restarts in each chunk",
	"zoompan":          "moves by frame numbers and times that restart in each chunk",
	"random":           "reorders frames at random over a window",
	"shuffleframes":    "reorders frames in groups counted from each chunk's start",
	"tile":             "combines several frames into one, counted from each chunk's start",
	"untile":           "splits frames into several, with times that restart in each chunk",
	"concat":           "joins timelines",
	"xfade":            "crossfades two timelines at a time",
	"noise":            "draws noise that changes from frame to frame in a sequence that restarts in each chunk",
	"subtitles":        "burns in subtitles by time; chunked encoding does not yet prove it safe: burn them in a job of its own",
	"ass":              "burns in subtitles by time; chunked encoding does not yet prove it safe: burn them in a job of its own",
	"vidstabdetect":    "analyses motion over the whole timeline",
	"vidstabtransform": "stabilises with motion over the whole timeline",
	"deshake":          "stabilises against the frame before: the first frame of each chunk would differ",
	"freezeframes":     "replaces frames by frame number",
	"uspp":             "codes each frame with an internal encoder whose GOP never ends, so each frame's result depends on the frames before: the first frames of each chunk would differ",
	"fps_mode":         "converts the frame rate along the whole timeline",
}

// rollFilters reach a bounded number of frames before and after each frame:
// chunked encoding gives each chunk that many frames around it (pre- and
// post-roll, Source.Roll), runs the user's graph over them all and keeps the
// chunk's own frames after the graph, so that each frame is filtered with the
// neighbours it has in one encode (TestPreRollDeinterlace proves the result
// equal, frame for frame, to one encode's). Each returns the reach, or why
// the filter as written cannot be split.
var rollFilters = map[string]func(args []command.FilterArg) (before, after int, why string){
	// prev, cur and next: one frame each way. The first frame of a stream
	// is its own prev, the last its own next; a roll clipped at the source's
	// edges meets the same edges.
	"yadif": func(a []command.FilterArg) (int, int, string) { return deinterlaceReach(a, "send_frame") },
	"bwdif": func(a []command.FilterArg) (int, int, string) { return deinterlaceReach(a, "send_field") },
}

// deinterlaceReach reads yadif's and bwdif's options (mode, parity, deint,
// by name or in that order): a frame-rate output (a frame per field)
// doubles the frame count, which the verification does not check against
// the source's frames; the rest is per frame.
func deinterlaceReach(args []command.FilterArg, defaultMode string) (int, int, string) {
	names := []string{"mode", "parity", "deint"}
	mode := defaultMode
	for i, kv := range args {
		k := strings.ToLower(kv.Key)
		if k == "" && i < len(names) {
			k = names[i]
		}
		v := strings.ToLower(kv.Val)
		switch k {
		case "mode":
			mode = v
		case "parity":
			if !slices.Contains([]string{"tff", "bff", "auto", "0", "1", "-1"}, v) {
				return 0, 0, fmt.Sprintf("has parity %q, which chunked encoding does not know", kv.Val)
			}
		case "deint":
			if !slices.Contains([]string{"all", "interlaced", "0", "1"}, v) {
				return 0, 0, fmt.Sprintf("has deint %q, which chunked encoding does not know", kv.Val)
			}
		default:
			return 0, 0, fmt.Sprintf("has option %q: chunked encoding splits it with mode, parity and deint alone", kv.Key)
		}
	}
	switch mode {
	case "send_frame", "0", "send_frame_nospatial", "2":
		return 1, 1, ""
	case "send_field", "1", "send_field_nospatial", "3":
		return 0, 0, "outputs a frame per field (mode=" + mode + ", doubling the frame rate), which chunked encoding cannot verify against the source's frames; deinterlace frame for frame with mode=send_frame"
	}
	return 0, 0, fmt.Sprintf("has mode %q, which chunked encoding does not know", mode)
}

// graphReach is how many frames before and after a frame graph g (checked)
// reads: the sum of its filters' reaches, enough for any way they connect.
func graphReach(g string) (before, after int) {
	_ = command.WalkGraph("", g, func(name, args string, _ bool) error {
		class, _, _ := strings.Cut(name, "@")
		if reach := rollFilters[strings.ToLower(class)]; reach != nil {
			b, a, _ := reach(command.FilterArgs(args))
			before, after = before+b, after+a
		}
		return nil
	})
	return before, after
}

// appendFilter puts filter f after graph g's output: after its last chain
// when that ends without a label, or on its last chain's one output label when
// no other part of g names it. ok is false when g's output is elsewhere.
func appendFilter(g, f string) (string, bool) {
	t := strings.TrimRight(g, " \n\t\r")
	if !strings.HasSuffix(t, "]") {
		return t + "," + f, true
	}
	i := strings.LastIndexByte(t, '[')
	if i < 0 {
		return "", false
	}
	label := t[i:]
	if strings.ContainsAny(label[1:len(label)-1], "[]'\\") || strings.Count(g, label) != 1 || strings.HasSuffix(strings.TrimRight(t[:i], " \n\t\r"), "]") {
		return "", false
	}
	return t + ";" + label + f, true
}

// sourceFilters make frames of their own: a second timeline.
var sourceFilters = toSet(`movie amovie color testsrc testsrc2 smptebars smptehdbars rgbtestsrc
yuvtestsrc nullsrc allrgb allyuv haldclutsrc life mandelbrot cellauto sierpinski gradients
zoneplate buffer sine anoisesrc aevalsrc anullsrc colorspectrum colorchart pal75bars pal100bars
openclsrc`)

// timeVarRe finds the variables of ffmpeg's expressions that read time, frame
// numbers or positions in the file (pkt_pos: a chunk is a file of its own):
// each chunk would count them from its own start.
var timeVarRe = regexp.MustCompile(`(^|[^A-Za-z0-9_])(t|n|T|N|pts|PTS|pos|POS|pkt_pos|time|frame|in|on|out_time|selected_n|prev_pts|prev_t|STARTPTS|STARTT|frame_num|eif|expr|localtime|gmtime)([^A-Za-z0-9_]|$)`)

// stateFuncRe finds the functions of ffmpeg's expressions that carry state from
// one evaluation to the next (random's seed and st/ld's variables live as long
// as the filter): frame after frame, a sequence that restarts in each chunk.
var stateFuncRe = regexp.MustCompile(`(^|[^A-Za-z0-9_])(random|randomi|st|ld)\s*\(`)

// exprWhy says why an expression (an option's value) cannot be split, "" if it can.
func exprWhy(v string) string {
	if m := timeVarRe.FindStringSubmatch(v); m != nil {
		return fmt.Sprintf("uses %q in an expression: times, frame numbers and file positions restart in each chunk", m[2])
	}
	if m := stateFuncRe.FindStringSubmatch(v); m != nil {
		return fmt.Sprintf("uses %s() in an expression: its state (a random sequence, stored variables) carries from frame to frame and would restart in each chunk", m[2])
	}
	return ""
}

// drawtextSafe are drawtext's text expansions (%{name}) that read the frame
// alone; any other (%{n}, %{pts}, %{localtime}...) reads a count, a time or
// the clock, and %{expr}/%{eif} are read as expressions.
var drawtextSafe = toSet(`pict_type metadata`)

// drawtextWhy says why drawtext text with expansions cannot be split, "" if it can.
func drawtextWhy(text string) string {
	for rest := text; ; {
		i := strings.Index(rest, "%{")
		if i < 0 {
			return ""
		}
		rest = rest[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			j = len(rest)
		}
		fn, args, _ := strings.Cut(rest[:j], ":")
		fn = strings.TrimSpace(fn)
		rest = rest[j:]
		switch {
		case drawtextSafe[fn]:
		case fn == "e" || fn == "expr" || fn == "eif" || fn == "expr_int_format":
			if why := exprWhy(args); why != "" {
				return "draws text whose expansion %{" + fn + ":...} " + why
			}
		default:
			return "draws text that expands %{" + fn + "}: only %{pict_type}, %{metadata:...} and %{expr:...} without times, frame numbers or state are frame-local; times and frame numbers (%{pts}, %{n}) restart in each chunk"
		}
	}
}

// textKeys are filter options holding text or names, never expressions.
var textKeys = toSet(`text fontfile font textfile fontcolor boxcolor bordercolor shadowcolor color
eval file filename flags interp_algo matrix primaries transfer range space trc all iall ispace itrc
iprimaries irange dither format pix_fmts preset`)

func toSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// checkGraph reads a video filter graph as libavfilter parses it (chains of
// [label]name=args[label], separated by "," and ";") and refuses what a chunk
// cannot run as the whole file would.
func checkGraph(w, g string) error {
	var split, retimed string
	err := command.WalkGraph(w, g, func(name, args string, hasArgs bool) error {
		class, _, _ := strings.Cut(name, "@")
		switch strings.ToLower(class) {
		case "split":
			split = name
		case "setpts":
			if hasArgs && !isPTS(args) {
				retimed = name + "=" + args
			}
		}
		return checkFilter(name, args, hasArgs)
	})
	if err == nil && split != "" && retimed != "" {
		// setpts=PTS-STARTPTS is safe on the one chain (the stitch places each
		// chunk), not on one branch of a split: STARTPTS is each chunk's own
		// first time, so the branches would meet (overlay, hstack, blend...)
		// at other frames than in one encode.
		return refuse("filter "+retimed, "re-times frames in a graph that splits them: STARTPTS is each chunk's first time, not the source's, so a re-timed branch would meet the other's frames at other times than in one encode; drop it (chunked encoding keeps the source's timestamps)")
	}
	return err
}

func checkFilter(name, args string, hasArgs bool) error {
	class, _, _ := strings.Cut(name, "@")
	class = strings.ToLower(class)
	written := name
	if hasArgs {
		written += "=" + args
	}
	what := "filter " + written
	if reach := rollFilters[class]; reach != nil {
		kvs := command.FilterArgs(args)
		for _, kv := range kvs {
			if strings.ToLower(kv.Key) == "enable" {
				return refuse(what, "is enabled by a timeline expression, over times or frame numbers that restart in each chunk")
			}
		}
		if _, _, why := reach(kvs); why != "" {
			return refuse(what, why)
		}
		return nil
	}
	if why, bad := timeFilters[class]; bad {
		if class == "setpts" && hasArgs && isStartPTS(args) {
			return nil
		}
		return refuse(what, why)
	}
	if sourceFilters[class] || strings.HasSuffix(class, "src") {
		return refuse(what, "makes frames of its own: a graph over a second timeline cannot be split (each chunk would start it again)")
	}
	if !frameFilters[class] {
		return refuse(what, "is not known to be frame-independent: chunked encoding allows filters whose output for a frame depends on that frame alone (docs/chunked.md lists them)")
	}
	kvs := command.FilterArgs(args)
	expansion, ditherOff := "normal", false // drawtext's and vignette's options, as written
	for _, kv := range kvs {
		switch strings.ToLower(kv.Key) {
		case "expansion":
			expansion = strings.ToLower(kv.Val)
		case "dither":
			ditherOff = isOff(kv.Val)
		}
	}
	for _, kv := range kvs {
		k := strings.ToLower(kv.Key)
		if k == "enable" {
			return refuse(what, "is enabled by a timeline expression, over times or frame numbers that restart in each chunk")
		}
		if class == "drawtext" && (k == "timecode" || k == "timecode_rate" || k == "rate" || k == "r") {
			return refuse(what, "draws a timecode counted from each chunk's start")
		}
		if class == "drawtext" && k == "text" {
			if expansion != "none" {
				if why := drawtextWhy(kv.Val); why != "" {
					return refuse(what, why)
				}
			}
			continue
		}
		if class == "drawtext" && k == "textfile" && expansion != "none" {
			return refuse(what, "reads its text from a file whose expansions (%{n}, %{pts}...) chunked encoding cannot check: write the text with text=, or add expansion=none")
		}
		if class == "drawtext" && k == "expansion" && strings.ToLower(kv.Val) == "strftime" {
			return refuse(what, "expands the text with strftime, the clock's time at each frame's encode: each chunk is encoded at another time")
		}
		if textKeys[k] {
			continue
		}
		if why := exprWhy(kv.Val); why != "" {
			return refuse(what, why)
		}
	}
	if class == "vignette" && !ditherOff {
		return refuse(what, "dithers (by default) with a random sequence carried from frame to frame, which would restart in each chunk: add dither=0")
	}
	return nil
}

// isOff tells whether a boolean option's value turns it off.
func isOff(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "no", "off", "disable":
		return true
	}
	return false
}

// isStartPTS tells whether setpts's expression is PTS-STARTPTS (or PTS): the
// stitch keeps each chunk's place on the source's timeline either way.
func isStartPTS(args string) bool {
	e := setptsExpr(args)
	return e == "PTS-STARTPTS" || e == "PTS"
}

// isPTS tells whether setpts's expression is PTS: it changes nothing.
func isPTS(args string) bool { return setptsExpr(args) == "PTS" }

func setptsExpr(args string) string {
	e := strings.ToUpper(strings.Join(strings.Fields(args), ""))
	return strings.TrimPrefix(e, "EXPR=")
}

// leadingLabels returns the [label]s at the start of graph g and the rest: the
// chunk's trim goes after them, before the first filter.
func leadingLabels(g string) (labels, rest string) { return command.LeadingLabels(g) }
