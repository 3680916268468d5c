package command

import (
	"fmt"
	"strings"
)

// walk reads argv as ffmpeg's command-line parser does: options (with the values
// they take), -i inputs and output files. Every option must be one ffmpeg knows
// and is not refused; paths, formats and filter graphs in values are checked.
func walk(argv []string, spec Spec) error {
	format := "" // the -f for the next -i or output
	for i := 0; i < len(argv); i++ {
		w := argv[i]
		if w == "-" { // stdout as the output: the runner discards it
			format = ""
			continue
		}
		if !strings.HasPrefix(w, "-") {
			if err := checkOutput(w, format, spec); err != nil {
				return err
			}
			format = ""
			continue
		}
		name, _, _ := strings.Cut(w[1:], ":") // -c:v, -b:a:0, -metadata:s:a:0
		kind, ok := ffmpegOptions[name]
		if !ok && strings.HasPrefix(name, "no") && ffmpegOptions[name[2:]]&optBool != 0 {
			// -noX for a boolean X: X set to 0, no value taken.
			kind, ok, name = optMain, true, name[2:]
		}
		if !ok {
			return fmt.Errorf("unknown option %q: only options ffmpeg knows are allowed", w)
		}
		if reason, bad := refusedOptions[name]; bad {
			return fmt.Errorf("option %q is not allowed: %s", w, reason)
		}
		if kind&optExit != 0 {
			return fmt.Errorf("option %q is not allowed: %s", w, exitReason)
		}
		if !spec.AllowGPU && (gpuOptions[name] || isGPUName(name)) {
			return fmt.Errorf("option %q: GPU options %s", w, gpuMessage)
		}
		if kind&optArg == 0 {
			continue
		}
		if i+1 >= len(argv) {
			return fmt.Errorf("option %s needs a value", w)
		}
		i++
		if err := checkValue(name, w, argv[i], &format, spec); err != nil {
			return err
		}
	}
	return nil
}

// checkValue checks the value v of option w (named name).
func checkValue(name, w, v string, format *string, spec Spec) error {
	switch {
	case name == "i":
		f := *format
		*format = ""
		if f == "lavfi" {
			return checkGraph(w, v, spec)
		}
		return checkPath(w, v, spec)
	case formatOptions[name]:
		if err := checkFormat(w, v, name == "f"); err != nil {
			return err
		}
		if name == "f" {
			*format = strings.ToLower(v)
		}
	case filterOptions[name]:
		return checkGraph(w, v, spec)
	case pathOptions[name]:
		return checkPath(w, v, spec)
	case dictOptions[name] || stringDictOptions[name]:
		return checkDict(w, v, spec)
	case codecOptions[name]:
		if !spec.AllowGPU && isGPUName(v) {
			return fmt.Errorf("%s %q: GPU codecs and filters %s", w, v, gpuMessage)
		}
	}
	return nil
}

// checkFormat refuses devices (ffmpeg -devices) as formats: they read or write the
// machine's cameras, screens and sound cards. lavfi is allowed for inputs (-f).
// Format names match case-insensitively, as in ffmpeg.
func checkFormat(w, v string, lavfi bool) error {
	for _, f := range strings.Split(strings.ToLower(v), ",") {
		f = strings.TrimSpace(f)
		if deviceFormats[f] && !(lavfi && f == "lavfi") {
			return fmt.Errorf("%s %s is not allowed: devices (cameras, screens, sound cards) cannot be used", w, v)
		}
	}
	return nil
}

// checkPath checks a path value: a job-relative file name.
func checkPath(w, v string, spec Spec) error {
	switch {
	case v == "":
		return fmt.Errorf("%s: an empty file name is not allowed", w)
	case strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~"):
		return fmt.Errorf("%s %q: absolute paths are not allowed; use inputs/<name>, outputs/<name> or a relative path", w, v)
	case strings.Contains(v, ":"):
		return fmt.Errorf("%s %q: URLs and protocol prefixes are not allowed in commands; pass inputs through input_files", w, v)
	case v == "-" || strings.HasPrefix(v, "-"):
		return fmt.Errorf("%s %q: a file name may not start with \"-\" (stdin/stdout)", w, v)
	}
	for _, part := range strings.Split(v, "/") {
		if part == ".." {
			return fmt.Errorf("%s %q: \"..\" is not allowed in paths", w, v)
		}
	}
	dir, rest, _ := strings.Cut(strings.TrimPrefix(v, "./"), "/")
	switch {
	case dir == "inputs" && !spec.Inputs[rest]:
		return fmt.Errorf("%s %q: inputs/%s is not a key of input_files", w, v, rest)
	case dir == "outputs" && !spec.Outputs[rest]:
		return fmt.Errorf("%s %q: outputs/%s is not an entry of output_files", w, v, rest)
	}
	return nil
}

// checkOutput checks an output file; after -f tee it is a list of outputs.
func checkOutput(v, format string, spec Spec) error {
	if format != "tee" {
		return checkPath("output", v, spec)
	}
	// The tee muxer: "[opts]name|[opts]name", each split off as av_get_token does;
	// opts run to the last "]" and are key=value pairs for that output's muxer.
	for s := v; ; {
		var slave string
		slave, s = getToken(s, "|")
		if strings.HasPrefix(slave, "[") {
			end := strings.LastIndexByte(slave, ']')
			if end < 0 {
				return fmt.Errorf("tee output %q: \"[\" without \"]\"", v)
			}
			if err := checkDict("tee output", slave[1:end], spec); err != nil {
				return err
			}
			slave = slave[end+1:]
		}
		if err := checkPath("tee output", slave, spec); err != nil {
			return err
		}
		if s == "" {
			return nil
		}
		s = s[1:]
	}
}

// checkDict checks a key=value list of options for a nested muxer, demuxer or
// protocol (-hls_segment_options, -format_opts, a tee output's [opts]...), parsed
// as av_dict_parse_string does: the refused options stay refused there, paths
// and formats are checked.
func checkDict(w, v string, spec Spec) error {
	for s := v; s != ""; {
		var key, val string
		key, s = getToken(s, "=")
		if key != "" && strings.HasPrefix(s, "=") {
			val, s = getToken(s[1:], ":")
		}
		if s != "" {
			s = s[1:]
		}
		k := strings.ToLower(strings.TrimPrefix(key, "-"))
		o := fmt.Sprintf("%s (%s=)", w, key)
		switch {
		case refusedOptions[k] != "":
			return fmt.Errorf("%s %q is not allowed: %s", w, key, refusedOptions[k])
		case pathOptions[k]:
			if err := checkPath(o, val, spec); err != nil {
				return err
			}
		case formatOptions[k] || k == "format":
			if err := checkFormat(o, val, false); err != nil {
				return err
			}
		case filterOptions[k]:
			if err := checkGraph(o, val, spec); err != nil {
				return err
			}
		case dictOptions[k] || stringDictOptions[k]:
			if err := checkDict(o, val, spec); err != nil {
				return err
			}
		}
	}
	return nil
}
