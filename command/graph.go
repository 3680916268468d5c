package command

import (
	"fmt"
	"regexp"
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
	s = s[i:]
	// The common case, a token with neither quotes nor escapes: a substring of s.
	// Linear either way: the token is copied at most once, never the rest of s.
	j := 0
	for j < len(s) && strings.IndexByte(term, s[j]) < 0 && s[j] != '\\' && s[j] != '\'' {
		j++
	}
	if j == len(s) || strings.IndexByte(term, s[j]) >= 0 {
		return strings.TrimRight(s[:j], whitespace), s[j:]
	}
	out := make([]byte, j, 2*j+16)
	copy(out, s[:j])
	end := 0 // out[:end] is protected from trimming
	i = j
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
	// ".." as a part of the graph however it is quoted: no filter option needs
	// it, and a graph's two quoting levels make it easy to hide a climb in. The
	// text that drawtext and metadata write is exempt.
	if strings.Contains(g, "..") && !strings.Contains(g, "drawtext") && !strings.Contains(g, "metadata") {
		for _, part := range strings.FieldsFunc(g, isPathSep) {
			if part == ".." {
				return fmt.Errorf("%s %q: \"..\" is not allowed in paths", w, g)
			}
		}
	}
	return WalkGraph(w, g, func(name, args string, hasArgs bool) error {
		return checkFilter(w, name, args, hasArgs, spec)
	})
}

// WalkGraph reads filter graph g as libavfilter's avfilter_graph_parse2 does
// (see checkGraph) and calls fn with each filter's name and arguments, unescaped
// once, in order; w names the option in its errors. chunked uses it too.
func WalkGraph(w, g string, fn func(name, args string, hasArgs bool) error) error {
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
		if err := fn(name, args, hasArgs); err != nil {
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

// filterNameRe is the form of a filter name: what may be deferred to the worker.
var filterNameRe = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// instanceNameRe is the form of a filter's @instance name (a label for
// commands such as sendcmd's; ffmpeg takes any text, the checker a plain one).
var instanceNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// checkFilter checks one filter: name (with an optional @instance) and its
// arguments, already unescaped once by the graph parser. A filter the service's
// table does not know is checked against the worker's ffmpeg (Spec.Worker); at
// the gateway it is deferred to the worker when its name is well-formed.
func checkFilter(w, name, args string, hasArgs bool, spec Spec) error {
	class, inst, hasInst := strings.Cut(name, "@")
	if hasInst && !instanceNameRe.MatchString(inst) {
		return fmt.Errorf("%s: filter %q: its instance name %q may hold only letters, digits, \"_\", \".\" and \"-\" (as in drawtext@title)", w, class, inst)
	}
	lc := strings.ToLower(class)
	if r, bad := refusedFilters[lc]; bad {
		return refuse(fmt.Sprintf("%s: filter %q", w, class), r)
	}
	if !ffmpegFilters[class] {
		if o := spec.Worker; o != nil {
			if err := o.load(); err != nil {
				return fmt.Errorf("%s: unknown filter %q: ffmpeg %s (the service's table) does not know it, and this worker's ffmpeg could not list its filters: %v", w, class, ffmpegVersion, err)
			}
			if !o.filters[class] {
				return fmt.Errorf("%s: unknown filter %q: neither ffmpeg %s (the service's table) nor this worker's ffmpeg %s knows it; check its spelling against ffmpeg -filters", w, class, ffmpegVersion, o.version)
			}
		} else if !filterNameRe.MatchString(class) {
			return fmt.Errorf("%s: unknown filter %q: no ffmpeg filter has that name; check its spelling against ffmpeg -filters", w, class)
		}
	}
	if !spec.AllowGPU && isGPUName(lc) {
		return fmt.Errorf("%s: filter %q: GPU codecs and filters %s", w, class, gpuMessage)
	}
	if !hasArgs {
		return nil
	}
	text := filterTextOptions[lc]
	for i, kv := range filterArgs(args) {
		// "/key=FILE" (ffmpeg 7) reads the option's value from a file, as -/opt
		// does for options.
		if strings.HasPrefix(kv.key, "/") {
			return refuse(fmt.Sprintf("%s: filter %q option %q", w, class, kv.key), refusal{"it reads the option's value from a file the checker never sees", "give the value in the filter graph"})
		}
		k := strings.ToLower(kv.key)
		if lc == "movie" || lc == "amovie" {
			// Options in declaration order: filename, format_name (f), stream_index...
			switch {
			case k == "filename" || (k == "" && i == 0):
				if err := checkPath(w+" "+class+" filename", kv.val, spec); err != nil {
					return err
				}
				if err := checkOpened(w+" "+class+" filename", "", kv.val, spec); err != nil {
					return err
				}
				continue
			case k == "f" || k == "format_name" || (k == "" && i == 1):
				if err := checkFormat(w+" "+class+" format", kv.val, false); err != nil {
					return err
				}
				if err := checkOpened(w+" "+class+" format", strings.ToLower(kv.val), "", spec); err != nil {
					return err
				}
				if f := strings.ToLower(strings.TrimSpace(kv.val)); strings.Contains(f, "lavfi") {
					return fmt.Errorf("%s: filter %q may not open a lavfi graph; instead, give the graph with -filter_complex", w, class)
				}
				continue
			case dictOptions[k]:
				if err := checkDict(w+" "+class, kv.val, spec, 0); err != nil {
					return err
				}
				continue
			}
		}
		if text[k] {
			continue // text the filter draws or writes, never opens
		}
		if threadOptions[k] {
			if err := checkThreads(fmt.Sprintf("%s: filter %q option %q", w, class, kv.key), kv.val); err != nil {
				return err
			}
			continue
		}
		if err := checkArg(kv.val, spec); err != nil {
			return fmt.Errorf("%s: filter %q: %w", w, class, err)
		}
	}
	return nil
}

// checkArg checks one filter option's value like a word; a font or other file of
// the sandbox's read-only start set may be named by its absolute path.
func checkArg(v string, spec Spec) error {
	for _, p := range readOnlyPrefixes {
		if strings.HasPrefix(v, p) && !strings.Contains(v, "..") && !strings.ContainsAny(v, `\'`) {
			return nil
		}
	}
	return check(v, spec)
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

// FilterArg is one option of a filter's arguments: Key "" for a bare value.
type FilterArg struct{ Key, Val string }

// FilterArgs splits a filter's arguments as libavfilter does (filterArgs).
func FilterArgs(args string) []FilterArg {
	kvs := filterArgs(args)
	out := make([]FilterArg, len(kvs))
	for i, kv := range kvs {
		out[i] = FilterArg{kv.key, kv.val}
	}
	return out
}

// LeadingLabels returns the [label]s at the start of graph g and the rest.
func LeadingLabels(g string) (labels, rest string) {
	s := skipSpace(g)
	r, ok := skipLabels(s)
	if !ok {
		return "", g
	}
	return s[:len(s)-len(r)], r
}
