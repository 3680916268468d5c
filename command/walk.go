package command

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// checker reads one argv as ffmpeg's command-line parser does: options (with the
// values they take), -i inputs and output files. Every word is checked for what
// it is: a path, a filter graph, a format, text, or another value.
type checker struct {
	spec Spec
	argv []string
	// Options given for the next input or output.
	format, fifoFormat, formatOpts string
	formatAt                       int         // argv index of the -f value; 0: none
	relative                       [][2]string // output-relative names: option word, value
	at                             int         // argv index of the value being checked
}

func (c *checker) next() {
	c.format, c.fifoFormat, c.formatOpts, c.formatAt, c.relative = "", "", "", 0, nil
}

// refuse is the error for a refused word: what, why, and what to write instead.
func refuse(what string, r refusal) error {
	return fmt.Errorf("%s is not allowed: %s; instead, %s", what, r.why, r.instead)
}

// walk checks argv and rewrites the null sink's names (NUL) in place.
func walk(argv []string, spec Spec) error {
	c := &checker{spec: spec, argv: argv}
	for i := 0; i < len(argv); i++ {
		w := argv[i]
		if w == "-" { // stdout as the output: the runner discards it
			c.next()
			continue
		}
		if !strings.HasPrefix(w, "-") {
			if err := c.output(i); err != nil {
				return err
			}
			c.next()
			continue
		}
		name, _, _ := strings.Cut(w[1:], ":") // -c:v, -b:a:0, -metadata:s:a:0
		kind, base, err := c.option(w, name, i)
		if err != nil {
			return err
		}
		if r, bad := refusedOptions[base]; bad {
			return refuse(fmt.Sprintf("option %q", w), r)
		}
		if r, bad := unsandboxedOptions[base]; bad && spec.Unsandboxed {
			return refuse(fmt.Sprintf("option %q", w), r)
		}
		if kind&optExit != 0 {
			return refuse(fmt.Sprintf("option %q", w), exitRefusal)
		}
		if !spec.AllowGPU && (gpuOptions[base] || isGPUName(base)) {
			return fmt.Errorf("option %q: GPU options %s", w, gpuMessage)
		}
		if kind&optArg == 0 {
			continue
		}
		if i+1 >= len(argv) {
			return fmt.Errorf("option %s needs a value", w)
		}
		i++
		c.at = i
		if err := c.value(base, w, argv[i]); err != nil {
			return err
		}
	}
	return nil
}

// optionNameRe is the form of an option name: what may be deferred to the worker.
var optionNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// specifierRe is the form of an option's stream specifier (v:0, a, p:1, #0x100,
// m:language:eng, s:a:0 for -metadata).
var specifierRe = regexp.MustCompile(`^[A-Za-z0-9_:#.-]{0,64}$`)

// option finds how ffmpeg reads -name (written w, at argv[i]) and the name the
// policy tables know it by.
func (c *checker) option(w, name string, i int) (optKind, string, error) {
	_, specifier, _ := strings.Cut(strings.TrimPrefix(w, "-"), ":")
	if !specifierRe.MatchString(specifier) {
		return 0, "", fmt.Errorf("option %q: %q is not a stream specifier (such as v, a:0, s:1, p:1, #0x100)", w, specifier)
	}
	if k, base, ok := lookup(ffmpegOptions, name); ok {
		return k, base, nil
	}
	if o := c.spec.Worker; o != nil {
		if err := o.load(); err != nil {
			return 0, "", fmt.Errorf("unknown option %q: ffmpeg %s (the service's table) does not know it, and this worker's ffmpeg could not list its options: %v", w, ffmpegVersion, err)
		}
		if k, base, ok := lookup(o.options, name); ok {
			return k, base, nil
		}
		return 0, "", fmt.Errorf("unknown option %q: neither ffmpeg %s (the service's table) nor this worker's ffmpeg %s knows it; check its spelling against ffmpeg -h full", w, ffmpegVersion, o.version)
	}
	if !optionNameRe.MatchString(name) {
		return 0, "", fmt.Errorf("unknown option %q: no ffmpeg option has that form; check its spelling against ffmpeg -h full", w)
	}
	// Deferred: the worker checks it against its own ffmpeg. It takes a value
	// unless the next word is an option.
	if i+1 < len(c.argv) {
		if n := c.argv[i+1]; strings.HasPrefix(n, "-") && len(n) > 1 {
			nn, _, _ := strings.Cut(n[1:], ":")
			if _, _, ok := lookup(ffmpegOptions, nn); ok {
				return 0, name, nil
			}
		}
	}
	return optArg, name, nil
}

// lookup finds name in t as ffmpeg does: the name, -noX for a boolean X, and the
// codec options with a stream type's letter before them (-vb, -ab, -vprofile).
func lookup(t map[string]optKind, name string) (optKind, string, bool) {
	if k, ok := t[name]; ok {
		return k, name, true
	}
	if strings.HasPrefix(name, "no") && t[name[2:]]&optBool != 0 {
		return optMain, name[2:], true // X set to 0, no value taken
	}
	if len(name) > 1 && strings.IndexByte("vas", name[0]) >= 0 && t[name[1:]]&optAV != 0 {
		return t[name[1:]], name[1:], true
	}
	return 0, "", false
}

// value checks v, the value of option w (known as name).
func (c *checker) value(name, w, v string) error {
	spec := c.spec
	switch {
	case name == "i":
		f := c.format
		c.next()
		if f == "lavfi" {
			return checkGraph(w, v, spec)
		}
		if err := checkOpened(w, f, v, spec); err != nil {
			return err
		}
		return c.input(w, v)
	case formatOptions[name]:
		if err := checkFormat(w, v, name == "f"); err != nil {
			return err
		}
		switch name {
		case "f":
			c.format, c.formatAt = strings.ToLower(v), c.at
		case "fifo_format":
			c.fifoFormat = strings.ToLower(v)
		}
		if err := check(v, spec); err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
	case name == "protocol_whitelist":
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); !localProtocols[p] {
				return refuse(fmt.Sprintf("%s %q", w, v), refusal{fmt.Sprintf("protocol %q needs the network, and %s", p, noNetwork), useInputs})
			}
		}
	case filterOptions[name]:
		return checkGraph(w, v, spec)
	case threadOptions[name]:
		return checkThreads(w, v)
	case pathOptions[name]:
		return checkPath(w, v, spec)
	case outputRelativeOptions[name]:
		if err := checkPathShape(w, v); err != nil {
			return err
		}
		c.relative = append(c.relative, [2]string{w, v})
	case textOptions[name]:
		return nil // text written into a file, never opened
	case dictOptions[name] || stringDictOptions[name]:
		if name == "format_opts" {
			c.formatOpts = v
		}
		return checkDict(w, v, spec, 0)
	case codecOptions[name]:
		if !spec.AllowGPU && isGPUName(v) {
			return fmt.Errorf("%s %q: GPU codecs and filters %s", w, v, gpuMessage)
		}
		if err := checkNVENC(w, v, spec); err != nil {
			return err
		}
		if err := check(v, spec); err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
	default:
		if err := check(v, spec); err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
	}
	return nil
}

// input checks an input: a job path, the concat protocol over job paths, or a
// pattern over declared inputs.
func (c *checker) input(w, v string) error {
	if parts, ok := strings.CutPrefix(v, "concat:"); ok {
		for _, p := range strings.Split(parts, "|") {
			if err := c.input(w+" (concat: part)", p); err != nil {
				return err
			}
		}
		return nil
	}
	rest, ok := strings.CutPrefix(strings.TrimPrefix(v, "./"), "inputs/")
	if ok && !c.spec.Inputs[rest] && strings.ContainsAny(rest, "%*?[{") && !strings.Contains(rest, "/") {
		// An image sequence or glob: with no "/" it matches files in inputs/ only.
		if err := checkPathShape(w, v); err != nil {
			return err
		}
		if !matchesInput(rest, c.spec.Inputs) {
			return fmt.Errorf("%s %q: the pattern matches no key of input_files; instead, declare each file in input_files (img001.png, img002.png, ...) and name them inputs/img%%03d.png", w, v)
		}
		return nil
	}
	return checkPath(w, v, c.spec)
}

var counterRe2 = regexp.MustCompile(`%0?[0-9]*d`)

// matchesInput tells whether pattern (an image2 sequence such as img%03d.png, or a
// glob) matches a declared input name.
func matchesInput(pattern string, inputs map[string]bool) bool {
	var re *regexp.Regexp
	if strings.Contains(pattern, "%") {
		var b strings.Builder
		b.WriteString("^")
		for s := pattern; s != ""; {
			loc := counterRe2.FindStringIndex(s)
			if loc == nil {
				b.WriteString(regexp.QuoteMeta(strings.ReplaceAll(s, "%%", "%")))
				break
			}
			b.WriteString(regexp.QuoteMeta(strings.ReplaceAll(s[:loc[0]], "%%", "%")))
			b.WriteString(`\d+`)
			s = s[loc[1]:]
		}
		b.WriteString("$")
		re, _ = regexp.Compile(b.String())
	}
	for name := range inputs {
		if re != nil && re.MatchString(name) {
			return true
		}
		if ok, err := path.Match(pattern, name); err == nil && ok {
			return true
		}
	}
	return false
}

// checkOpened refuses, on a pool without a sandbox, an input that would open files
// the checker never sees: a playlist demuxer (format f, or the name's extension,
// by which ffmpeg picks the HLS demuxer).
func checkOpened(w, f, v string, spec Spec) error {
	if !spec.Unsandboxed {
		return nil
	}
	for _, f := range strings.Split(f, ",") {
		if r, bad := unsandboxedFormats[strings.TrimSpace(f)]; bad {
			return refuse(fmt.Sprintf("%s with -f %s", w, f), r)
		}
	}
	l := strings.ToLower(v)
	for _, ext := range playlistExts {
		if strings.HasSuffix(l, ext) {
			return refuse(fmt.Sprintf("%s %q", w, v), unsandboxedPlaylist)
		}
	}
	return nil
}

// checkFormat refuses devices (ffmpeg -devices) as formats: they read or write the
// machine's cameras, screens and sound cards. lavfi is allowed for inputs (-f).
// Format names match case-insensitively, as in ffmpeg.
// formatNameRe is the shape of a muxer's or demuxer's name.
var formatNameRe = regexp.MustCompile(`^[a-z0-9_]+$`)

func checkFormat(w, v string, lavfi bool) error {
	for _, f := range strings.Split(strings.ToLower(v), ",") {
		f = strings.TrimSpace(f)
		if !formatNameRe.MatchString(f) {
			// ffmpeg's muxers and demuxers are named in these letters alone:
			// anything else is no format, and may read as a path.
			return fmt.Errorf("%s %q: not a format name (letters, digits and _, as in mp4, mpegts, image2; a list separated by commas)", w, v)
		}
		if deviceFormats[f] && !(lavfi && f == "lavfi") {
			return refuse(fmt.Sprintf("%s %s", w, v), refusal{"devices (cameras, screens, sound cards) cannot be used", "put the media in input_files, or generate it with -f lavfi -i (testsrc, sine, color...)"})
		}
	}
	return nil
}

// checkPathShape checks that a path value names a file in the job's directory:
// not empty, not absolute, no "..", no protocol prefix, not stdin/stdout.
func checkPathShape(w, v string) error {
	if strings.ContainsAny(v, `\'`) {
		// ffmpeg takes a path as written, but a path that an unescaping reader
		// would see as absolute or climbing is no name anyone needs.
		if u := strings.NewReplacer(`\`, "", "'", "").Replace(v); u != v {
			if err := checkPathShape(w, u); err != nil {
				return fmt.Errorf("%s %q is read as %q: %w", w, v, u, err)
			}
		}
	}
	switch {
	case v == "":
		return fmt.Errorf("%s: an empty file name is not allowed", w)
	case strings.Contains(v, ":"):
		return fmt.Errorf("%s %q: URLs and protocol prefixes are not allowed in commands (%s); instead, %s", w, v, noNetwork, useInputs)
	case strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~") || (strings.Contains(v, "/") && absRe.MatchString(v)):
		return fmt.Errorf("%s %q: absolute paths are not allowed: ffmpeg sees only the job's directory; instead, use inputs/<name>, outputs/<name> or a relative path", w, v)
	case strings.HasPrefix(v, "-"):
		return fmt.Errorf("%s %q: a file name may not start with \"-\" (stdin/stdout); instead, name a file such as outputs/<name>", w, v)
	}
	for _, part := range strings.FieldsFunc(v, isPathSep) {
		if part == ".." {
			return fmt.Errorf("%s %q: \"..\" is not allowed in paths: ffmpeg sees only the job's directory; instead, use inputs/<name>, outputs/<name> or a relative path", w, v)
		}
	}
	return nil
}

// checkPath checks a path value: a job-relative file name, and inputs/ and
// outputs/ names that the job declares.
func checkPath(w, v string, spec Spec) error {
	if err := checkPathShape(w, v); err != nil {
		return err
	}
	dir, rest, _ := strings.Cut(strings.TrimPrefix(v, "./"), "/")
	switch {
	case dir == "inputs" && !spec.Inputs[rest]:
		return fmt.Errorf("%s %q: inputs/%s is not a key of input_files; instead, add %q to input_files", w, v, rest, rest)
	case dir == "outputs" && !spec.Outputs[rest]:
		return fmt.Errorf("%s %q: outputs/%s is not an entry of output_files; instead, add %q to output_files", w, v, rest, rest)
	}
	return nil
}

// output checks the output file at argv[i]: the null sink (NUL becomes
// /dev/null), a job path, or after -f tee (or a fifo muxing into tee) a list of
// outputs.
func (c *checker) output(i int) error {
	v := c.argv[i]
	if to, ok := nullSinks[v]; ok {
		// The null muxer writes nothing: the sandbox's /dev/null is read-only,
		// so "-f mp4 /dev/null" (a first pass) becomes "-f null /dev/null".
		c.argv[i] = to
		if c.formatAt > 0 {
			c.argv[c.formatAt] = "null"
		}
		return nil
	}
	if c.format == "tee" || (c.format == "fifo" && (c.fifoFormat == "tee" || mentionsTee(c.formatOpts, 0))) {
		return checkTee("output", v, c.spec, 0)
	}
	if err := checkPath("output", v, c.spec); err != nil {
		return err
	}
	// Names the muxer writes beside its output (the HLS master playlist: above
	// the variants' directory when that holds %v).
	dir := path.Dir(v)
	if strings.Contains(path.Base(dir), "%v") {
		dir = path.Dir(dir)
	}
	for _, r := range c.relative {
		p := path.Join(dir, r[1])
		if err := checkPath(r[0], p, c.spec); err != nil {
			return fmt.Errorf("%s %q writes %s beside output %s: %w", r[0], r[1], p, v, err)
		}
	}
	return nil
}

// maxTeeDepth bounds tee lists inside tee lists (a slave muxing into tee).
const maxTeeDepth = 4

// checkTee checks a tee muxer's list of outputs: "[opts]name|[opts]name", each
// split off as av_get_token does; opts run to the last "]" and are key=value
// pairs for that output's muxer. A slave whose options name tee (f=tee,
// fifo_format=tee, in fifo_options or format_opts too) is a tee list itself.
func checkTee(w, v string, spec Spec, depth int) error {
	if depth >= maxTeeDepth {
		return fmt.Errorf("%s %q: tee outputs nested more than %d deep; instead, list every output in one tee", w, v, maxTeeDepth)
	}
	for s := v; ; {
		var slave, opts string
		slave, s = getToken(s, "|")
		if strings.HasPrefix(slave, "[") {
			var ok bool
			if opts, slave, ok = teeOptions(slave[1:]); !ok {
				return fmt.Errorf("tee output %q: its options are not key=value pairs in \"[...]\" (as in [f=mp4:onfail=ignore]outputs/out.mp4)", v)
			}
			if err := checkDict("tee output", opts, spec, 0); err != nil {
				return err
			}
		}
		if slave == "/dev/null" { // the null sink
		} else if mentionsTee(opts, 0) {
			if err := checkTee("tee output", slave, spec, depth+1); err != nil {
				return err
			}
		} else if err := checkPath("tee output", slave, spec); err != nil {
			return err
		}
		if s == "" {
			return nil
		}
		s = s[1:]
	}
}

// teeOptions splits "opts]name" (after a slave's "[") where libavformat's tee
// does (parse_slave_options): the options are key=value pairs separated by ":",
// each value a token that ends at an unquoted, unescaped ":" or "]", and the
// first "]" after a pair ends them: opts is that part as written, name the rest.
func teeOptions(p string) (opts, name string, ok bool) {
	if strings.HasPrefix(p, "]") {
		return "", p[1:], true
	}
	rest := p
	for rest != "" {
		t := skipSpace(rest)
		j := 0
		for j < len(t) && isKeyChar(t[j]) {
			j++
		}
		t = skipSpace(t[j:])
		if j == 0 || !strings.HasPrefix(t, "=") {
			return "", "", false // ffmpeg: "Invalid slave option" (an empty key too: av_dict_parse_string)
		}
		_, rest = getToken(t[1:], ":]")
		switch {
		case strings.HasPrefix(rest, "]"):
			return p[:len(p)-len(rest)], rest[1:], true
		case strings.HasPrefix(rest, ":"):
			rest = rest[1:]
		}
	}
	return "", "", false
}

// mentionsTee tells whether a key=value list of muxer options names the tee
// muxer as a format, directly or in a nested list.
func mentionsTee(v string, depth int) bool {
	if depth > maxTeeDepth {
		return true // too deep to tell: read it as a tee list
	}
	found := false
	eachKeyVal(v, func(key, val string) {
		k := strings.ToLower(strings.TrimPrefix(key, "-"))
		switch {
		case (k == "f" || k == "format" || k == "fifo_format") && strings.EqualFold(strings.TrimSpace(val), "tee"):
			found = true
		case dictOptions[k] && mentionsTee(val, depth+1):
			found = true
		}
	})
	return found
}

// eachKeyVal calls f for each pair of a key=value list, parsed as
// av_dict_parse_string does.
func eachKeyVal(v string, f func(key, val string)) {
	for s := v; s != ""; {
		var key, val string
		key, s = getToken(s, "=")
		if key != "" && strings.HasPrefix(s, "=") {
			val, s = getToken(s[1:], ":")
		}
		if s != "" {
			s = s[1:]
		}
		f(key, val)
	}
}

// checkDict checks a key=value list of options for a nested muxer, demuxer or
// protocol (-hls_segment_options, -format_opts, a tee output's [opts]...): the
// refused options stay refused there, paths, formats and graphs are checked,
// text is left alone, and any other value is checked like a word.
func checkDict(w, v string, spec Spec, depth int) error {
	if depth > maxTeeDepth {
		return fmt.Errorf("%s: option lists nested more than %d deep", w, maxTeeDepth)
	}
	var err error
	eachKeyVal(v, func(key, val string) {
		if err != nil {
			return
		}
		k := strings.ToLower(strings.TrimPrefix(key, "-"))
		o := w + " (" + key + "=)"
		switch {
		case refusedOptions[k] != (refusal{}):
			err = refuse(fmt.Sprintf("%s %q", w, key), refusedOptions[k])
		case spec.Unsandboxed && unsandboxedOptions[k] != (refusal{}):
			err = refuse(fmt.Sprintf("%s %q", w, key), unsandboxedOptions[k])
		case k == "protocol_whitelist":
			err = (&checker{spec: spec}).value(k, o, val)
		case pathOptions[k]:
			err = checkPath(o, val, spec)
		case threadOptions[k]:
			err = checkThreads(o, val)
		case formatOptions[k] || k == "format":
			err = checkFormat(o, val, false)
		case filterOptions[k]:
			err = checkGraph(o, val, spec)
		case dictOptions[k] || stringDictOptions[k]:
			err = checkDict(o, val, spec, depth+1)
		case textOptions[k]:
		default:
			if e := check(val, spec); e != nil {
				err = fmt.Errorf("%s: %w", o, e)
			}
		}
	})
	return err
}

// checkThreads checks a thread count: an integer from 0 ("auto") to MaxThreads.
func checkThreads(w, v string) error {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "auto") {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxThreads {
		return fmt.Errorf("%s %q: a thread count is a whole number from 0 (ffmpeg chooses) to %d", w, v, MaxThreads)
	}
	return nil
}
