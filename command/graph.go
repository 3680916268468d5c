package command

import (
	"fmt"
	"strings"
)

// whitespace is what libavutil and libavfilter skip around tokens.
const whitespace = " \n\t\r"

// getToken is libavutil's av_get_token: it skips leading whitespace, reads up to
// the first unquoted, unescaped byte of term, drops '…' quotes and \ escapes and
// trims trailing whitespace that was neither. It returns the token and the rest
// of s, from the terminating byte on.
func getToken(s, term string) (string, string) {
	i := 0
	for i < len(s) && strings.IndexByte(whitespace, s[i]) >= 0 {
		i++
	}
	out := make([]byte, 0, len(s)-i)
	end := 0 // out[:end] is protected from trimming
	for i < len(s) && strings.IndexByte(term, s[i]) < 0 {
		c := s[i]
		i++
		switch {
		case c == '\\' && i < len(s):
			out = append(out, s[i])
			i++
			end = len(out)
		case c == '\'':
			for i < len(s) && s[i] != '\'' {
				out = append(out, s[i])
				i++
			}
			if i < len(s) {
				i++
				end = len(out)
			}
		default:
			out = append(out, c)
		}
	}
	for len(out) > end && strings.IndexByte(whitespace, out[len(out)-1]) >= 0 {
		out = out[:len(out)-1]
	}
	return string(out), s[i:]
}

func skipSpace(s string) string { return strings.TrimLeft(s, whitespace) }

// checkGraph parses a filter graph as libavfilter's avfilter_graph_parse2 does:
// an optional "sws_flags=...;" prefix, then filters separated by "," (chains) and
// ";", each "[label]"... name[@instance][=args] "[label]"..., where the name runs
// to an unquoted, unescaped "=", ",", ";" or "[", and args to "[", "]", "," or ";".
// Every filter must be one ffmpeg knows and not refused.
func checkGraph(w, g string, spec Spec) error {
	s := skipSpace(g)
	if strings.HasPrefix(s, "sws_flags=") {
		i := strings.IndexByte(s, ';')
		if i < 0 {
			return fmt.Errorf("%s %q: sws_flags not terminated with \";\"", w, g)
		}
		s = s[i+1:]
	}
	for {
		s = skipSpace(s)
		var ok bool
		if s, ok = skipLabels(s); !ok {
			return fmt.Errorf("%s %q: bad or unterminated [label]", w, g)
		}
		var name, args string
		name, s = getToken(s, "=,;[")
		hasArgs := strings.HasPrefix(s, "=")
		if hasArgs {
			args, s = getToken(s[1:], "[],;")
		}
		if err := checkFilter(w, name, args, hasArgs, spec); err != nil {
			return err
		}
		if s, ok = skipLabels(s); !ok {
			return fmt.Errorf("%s %q: bad or unterminated [label]", w, g)
		}
		s = skipSpace(s)
		if s == "" {
			return nil
		}
		if s[0] != ',' && s[0] != ';' {
			return fmt.Errorf("%s %q: cannot parse the filter graph at %q", w, g, s)
		}
		s = s[1:]
	}
}

// checkFilter checks one filter: name (with an optional @instance) and its
// arguments, already unescaped once by the graph parser.
func checkFilter(w, name, args string, hasArgs bool, spec Spec) error {
	class, _, _ := strings.Cut(name, "@")
	lc := strings.ToLower(class)
	// GPU workers often run another ffmpeg build than the one the table comes from
	// (scale_npp, scale_cuda...): on GPU pools a GPU filter's name is enough.
	if !ffmpegFilters[class] && !(spec.AllowGPU && isGPUName(lc) && ValidName(class)) {
		return fmt.Errorf("%s: unknown filter %q: only filters ffmpeg knows are allowed", w, class)
	}
	if reason, bad := refusedFilters[lc]; bad {
		return fmt.Errorf("%s: filter %q is not allowed: %s", w, class, reason)
	}
	if !spec.AllowGPU && isGPUName(lc) {
		return fmt.Errorf("%s: filter %q: GPU codecs and filters %s", w, class, gpuMessage)
	}
	if !hasArgs {
		return nil
	}
	switch lc {
	case "sendcmd", "asendcmd":
		// Options in declaration order: commands (c), filename (f).
		for i, kv := range filterArgs(args) {
			k := strings.ToLower(kv.key)
			if k == "f" || k == "filename" || (k == "" && i > 0) {
				return fmt.Errorf("%s: filter %q may not read its commands from a file (f=, filename= or a second argument); give them with c=", w, class)
			}
		}
	case "movie", "amovie":
		// Options in declaration order: filename, format_name (f), stream_index...
		for i, kv := range filterArgs(args) {
			k := strings.ToLower(kv.key)
			switch {
			case k == "filename" || (k == "" && i == 0):
				if err := checkPath(w+" "+class+" filename", kv.val, spec); err != nil {
					return err
				}
			case k == "f" || k == "format_name" || (k == "" && i == 1):
				if err := checkFormat(w+" "+class+" format", kv.val, false); err != nil {
					return err
				}
				if f := strings.ToLower(strings.TrimSpace(kv.val)); strings.Contains(f, "lavfi") {
					return fmt.Errorf("%s: filter %q may not open a lavfi graph", w, class)
				}
			case dictOptions[k]:
				if err := checkDict(w+" "+class, kv.val, spec); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type keyVal struct{ key, val string }

// filterArgs splits a filter's arguments as libavfilter's process_options does
// (av_opt_get_key_value): pairs separated by ":", each "key=value" or a bare
// value for the next option in declaration order (key ""). A key is made of
// [A-Za-z0-9_./-], blanks allowed around it.
func filterArgs(args string) []keyVal {
	var kvs []keyVal
	for s := args; s != ""; {
		key := ""
		t := skipSpace(s)
		j := 0
		for j < len(t) && isKeyChar(t[j]) {
			j++
		}
		if u := skipSpace(t[j:]); strings.HasPrefix(u, "=") {
			key, s = t[:j], u[1:]
		}
		var val string
		val, s = getToken(s, ":")
		if s != "" {
			s = s[1:]
		}
		kvs = append(kvs, keyVal{key, val})
	}
	return kvs
}

func isKeyChar(c byte) bool {
	return c|32 >= 'a' && c|32 <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '/' || c == '.'
}

// skipLabels skips the [label]s at the start of s and the blanks after each; ok
// is false for an empty or unterminated label.
func skipLabels(s string) (rest string, ok bool) {
	for strings.HasPrefix(s, "[") {
		var label string
		label, s = getToken(s[1:], "]")
		if label == "" || !strings.HasPrefix(s, "]") {
			return s, false
		}
		s = skipSpace(s[1:])
	}
	return s, true
}
