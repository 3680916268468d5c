package command

import (
	"fmt"
	"regexp"
	"strings"
)

// Spec is what a command may refer to.
type Spec struct {
	Inputs   map[string]bool // names of input_files
	Outputs  map[string]bool // entries of output_files
	AllowGPU bool            // the pool has NVIDIA GPUs
	// NoNVENC, when set, says the pool's GPUs have no video encoder (NVENC): NVENC
	// encoders are refused with this text, the reason and the fix (see nvenc.go).
	NoNVENC string
	// Worker is the runner's own ffmpeg: options and filters the service's table
	// does not know are checked against it. Nil (the gateway) defers well-formed
	// unknown names to the worker.
	Worker *Options
	// Unsandboxed: the pool runs ffmpeg without a sandbox (sandbox = "none"), so
	// nothing contains what a file names: the forms that open files the checker
	// never sees are refused too (unsandboxedOptions, playlists; policy.go).
	Unsandboxed bool
}

var (
	nameRe        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	counterRe     = regexp.MustCompile(`%0?[1-9]?d`)
	placeholderRe = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}|<<\s*([^<>]*?)\s*>>`)
	// A reference to a job path: inputs/<name> or outputs/<name>, wherever it appears
	// in a word (after "=", inside a filter argument, ...).
	refRe = regexp.MustCompile(`(^|[^A-Za-z0-9._-])(inputs|outputs)/([^\s'":,;|\[\]=]*)`)
	// A protocol prefix such as "concat:" or "http://". ffmpeg's protocol names (ffmpeg
	// -protocols) plus the URL form of anything else. Not after ".", "/" or "-": in
	// "inputs/subs.srt:force_style=..." the "srt:" ends a path, it starts nothing.
	protoRe = regexp.MustCompile(`(?i)(^|[^A-Za-z0-9_./-])(async|bluray|cache|concat|concatf|crypto|data|ffrtmpcrypt|ffrtmphttp|file|ftp|gopher|gophers|hls|http|httpproxy|https|icecast|ipfs|ipns|md5|mmsh|mmst|pipe|prompeg|rist|rtmp|rtmpe|rtmps|rtmpt|rtmpte|rtmpts|rtp|sctp|sftp|srt|srtp|subfile|tcp|tee|tls|udp|udplite|unix|zmq|amqp|fd|android_content|libssh|librist|libsrt|libzmq|smb|dav|rtsp):|[A-Za-z][A-Za-z0-9+.-]*://`)
	// A path after a filter or option separator or a tee muxer's "[opts]", with
	// the blanks ffmpeg skips before an option value.
	absRe = regexp.MustCompile(`[=:'",;|\]]\s*~?/`)
	// The URL form alone: what an escaped "\:" may still hide once unescaped.
	urlRe = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://`)
	// GPU-only codecs and filters: NVENC/NVDEC/CUVID/CUDA/NPP names.
	gpuRe = regexp.MustCompile(`(?i)(_nvenc|_cuvid|_npp|_cuda|nvdec|^cuda$|(^|[^A-Za-z0-9])cuda([^A-Za-z0-9]|$)|scale_npp|hwupload_cuda|(^|[^A-Za-z0-9_])npp)`)
)

// ValidName reports whether name is a valid input or plain output file name.
func ValidName(name string) bool { return nameRe.MatchString(name) }

// ValidOutputName is ValidName, plus at most one printf counter (%d, %03d) for
// sequence outputs such as seg_%03d.ts.
func ValidOutputName(name string) bool {
	locs := counterRe.FindAllStringIndex(name, -1)
	if len(locs) > 1 {
		return false
	}
	if len(locs) == 1 {
		name = name[:locs[0][0]] + "0" + name[locs[0][1]:]
	}
	return strings.Count(name, "%") == 0 && nameRe.MatchString(name)
}

// Prepare splits one client command into ffmpeg's argv: a leading "ffmpeg" word is
// dropped, {{name}} and <<name>> become inputs/name or outputs/name, and every word is
// checked: no absolute paths, no "..", no URLs or protocol prefixes, no undeclared
// inputs/ or outputs/ names, no GPU codec or filter unless the pool has GPUs. Then
// argv is read as ffmpeg reads it (walk): only options and filters ffmpeg knows,
// none refused, job-relative paths, no devices. See the package documentation.
func Prepare(cmd string, spec Spec) ([]string, error) {
	// "{{ name }}" would be split into three words: close up the blanks first.
	if strings.Contains(cmd, "{{ ") || strings.Contains(cmd, " }}") || strings.Contains(cmd, "<< ") || strings.Contains(cmd, " >>") {
		cmd = placeholderRe.ReplaceAllStringFunc(cmd, func(m string) string {
			sub := placeholderRe.FindStringSubmatch(m)
			if sub[1] != "" {
				return "{{" + sub[1] + "}}"
			}
			return "<<" + sub[2] + ">>"
		})
	}
	words, err := Split(cmd)
	if err != nil {
		return nil, err
	}
	if len(words) > 0 && (words[0] == "ffmpeg" || strings.HasSuffix(words[0], "/ffmpeg")) {
		words = words[1:]
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("command is empty")
	}
	if !strings.HasPrefix(words[0], "-") {
		return nil, fmt.Errorf("command must start with an option (e.g. -i), got %q", words[0])
	}
	out := make([]string, len(words))
	for i, w := range words {
		// "-/vf FILE" (ffmpeg 7) reads an option's value from a file.
		if strings.HasPrefix(w, "-/") {
			return nil, refuse(fmt.Sprintf("%q", w), refusal{"it reads the option's value from a file the checker never sees", "give the value on the command line"})
		}
		// A refused option anywhere, even as another option's value (walk checks
		// options where ffmpeg reads them).
		if strings.HasPrefix(w, "-") {
			name, _, _ := strings.Cut(w[1:], ":")
			if r, bad := refusedOptions[name]; bad {
				return nil, refuse(fmt.Sprintf("%q", w), r)
			}
			if r, bad := unsandboxedOptions[name]; bad && spec.Unsandboxed {
				return nil, refuse(fmt.Sprintf("%q", w), r)
			}
		}
		if strings.IndexByte(w, 0) >= 0 {
			return nil, fmt.Errorf("%q: NUL bytes are not allowed", w)
		}
		w, err = rewrite(w, spec)
		if err != nil {
			return nil, err
		}
		out[i] = w
	}
	// Each word is checked for what it is where ffmpeg reads it: a path, a
	// filter graph, text, or another value (check).
	if err := walk(out, spec); err != nil {
		return nil, err
	}
	return out, nil
}

func rewrite(w string, spec Spec) (string, error) {
	if !strings.ContainsAny(w, "{}<>") {
		return w, nil // the common case, without the regexp
	}
	var bad error
	w = placeholderRe.ReplaceAllStringFunc(w, func(m string) string {
		sub := placeholderRe.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		switch {
		case spec.Inputs[name]:
			return "inputs/" + name
		case spec.Outputs[name]:
			return "outputs/" + name
		}
		if bad == nil {
			bad = fmt.Errorf("%s does not name an input_files key or an output_files entry", m)
		}
		return m
	})
	if bad == nil {
		for _, p := range []string{"{{", "}}"} { // a lone << or >> may be text
			if strings.Contains(w, p) {
				return w, fmt.Errorf("%q: a placeholder is {{name}} or <<name>>, with a name from input_files or output_files", w)
			}
		}
	}
	return w, bad
}

// check checks a word as written and, when it holds quotes or backslashes, as
// ffmpeg's filter parser reads it: that parser unescapes twice (the graph, then
// each option value), so "textfile=\/etc/passwd" or "http\:\/\/" hide a path or
// a URL from checks that look at the word as written. Dropping every backslash and
// single quote shows what any depth of escaping leaves.
func check(w string, spec Spec) error {
	if err := checkWord(w, spec, false); err != nil {
		return err
	}
	if strings.ContainsAny(w, `\'`) {
		u := strings.NewReplacer(`\`, "", "'", "").Replace(w)
		if err := checkWord(u, spec, true); err != nil {
			return fmt.Errorf("%q is read by ffmpeg as %v", w, err)
		}
	}
	return nil
}

// checkWord runs each regexp only when the literal it needs is in the word:
// validation is on the create path, and most words are plain options and numbers.
// An unescaped word is checked for the URL form only: text such as
// drawtext=text='Data\: 5' must not read as the data: protocol.
func checkWord(w string, spec Spec, unescaped bool) error {
	if strings.Contains(w, ":") && ((!unescaped && protoRe.MatchString(w)) || (unescaped && urlRe.MatchString(w))) {
		return fmt.Errorf("%q: URLs and protocol prefixes are not allowed in commands; pass inputs through input_files", w)
	}
	if strings.Contains(w, "..") {
		for _, part := range strings.FieldsFunc(w, isPathSep) {
			if part == ".." {
				return fmt.Errorf("%q: \"..\" is not allowed in paths", w)
			}
		}
	}
	l := strings.ToLower(w)
	if strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~") || (strings.Contains(w, "/") && absRe.MatchString(w)) {
		return fmt.Errorf("%q: absolute paths are not allowed; use inputs/<name>, outputs/<name> or a relative path", w)
	}
	if !strings.Contains(w, "inputs/") && !strings.Contains(w, "outputs/") {
		return checkGPU(w, l, spec)
	}
	for _, m := range refRe.FindAllStringSubmatch(w, -1) {
		dir, name := m[2], m[3]
		if dir == "inputs" && !spec.Inputs[name] {
			return fmt.Errorf("%q: inputs/%s is not a key of input_files", w, name)
		}
		if dir == "outputs" && !spec.Outputs[name] {
			return fmt.Errorf("%q: outputs/%s is not an entry of output_files", w, name)
		}
	}
	return checkGPU(w, l, spec)
}

// checkGPU checks w, whose lower case is l.
func checkGPU(w, l string, spec Spec) error {
	if spec.AllowGPU {
		return nil
	}
	// Every GPU name contains "nv", "cu" or "np".
	if (strings.Contains(l, "nv") || strings.Contains(l, "cu") || strings.Contains(l, "np")) && gpuRe.MatchString(w) {
		return fmt.Errorf("%q: GPU codecs and filters need a GPU machine (e.g. \"machine\": \"nvidia\")", w)
	}
	return nil
}

func isPathSep(r rune) bool { return strings.ContainsRune(`/\\=:'",;|[] `, r) }
