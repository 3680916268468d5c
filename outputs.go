package mediajobs

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

var (
	counterRe = regexp.MustCompile(`%0?([1-9]?)d`)
	// variantRe is ffmpeg's %v (-var_stream_map): a variant's index, or its name
	// when the map gives one (name:720p).
	variantRe = regexp.MustCompile(`%v`)
	// outputPartRe is one part of an output name once its patterns are filled in.
	outputPartRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	// producedPartRe is one part of a produced file's name (a counter or a variant
	// name may have made it longer than a declared name can be).
	producedPartRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// MaxOutputDirs is how many directory levels an output name may have: one, as in
// stream_%v/playlist.m3u8 (an HLS ladder's per-variant directories).
const MaxOutputDirs = 1

// ValidOutputName reports whether name may be an entry of output_files: a file
// name [A-Za-z0-9][A-Za-z0-9._-]{0,127}, optionally under one directory of the
// same form ("hls/index.m3u8"), 128 characters at most in all; the file name may
// hold one printf counter (%d, %03d) for sequences, and each part one %v, ffmpeg's
// variant of an HLS ladder (-var_stream_map): "stream_%v/data%03d.ts". A pattern
// counts as one character. No "..", no absolute path, no backslash.
func ValidOutputName(name string) bool {
	if strings.Count(name, "/") > MaxOutputDirs || strings.ContainsAny(name, `\`) {
		return false
	}
	parts := strings.Split(name, "/")
	total := len(parts) - 1
	for i, p := range parts {
		if len(variantRe.FindAllStringIndex(p, -1)) > 1 {
			return false
		}
		p = variantRe.ReplaceAllString(p, "0")
		counters := counterRe.FindAllStringIndex(p, -1)
		if len(counters) > 1 || len(counters) == 1 && i < len(parts)-1 {
			return false // one counter, in the file name
		}
		p = counterRe.ReplaceAllString(p, "0")
		if strings.Contains(p, "%") || !outputPartRe.MatchString(p) {
			return false
		}
		total += len(p)
	}
	return total <= 128
}

// OutputPattern matches the files one output_files entry stands for: the name
// itself, or for a sequence such as seg_%03d.ts every seg_<digits>.ts, and for a
// ladder's stream_%v/playlist.m3u8 every stream_<variant>/playlist.m3u8.
func OutputPattern(name string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	rest := name
	for rest != "" {
		c := counterRe.FindStringIndex(rest)
		v := variantRe.FindStringIndex(rest)
		switch {
		case c == nil && v == nil:
			b.WriteString(regexp.QuoteMeta(rest))
			rest = ""
		case v == nil || c != nil && c[0] < v[0]:
			b.WriteString(regexp.QuoteMeta(rest[:c[0]]) + `\d+`)
			rest = rest[c[1]:]
		default:
			b.WriteString(regexp.QuoteMeta(rest[:v[0]]) + `[A-Za-z0-9._-]+`)
			rest = rest[v[1]:]
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// validProduced reports whether a produced file's name (relative to outputs/) is
// one a job may publish: a file, or a file in one directory, each part a plain
// name (no ".", "..", blanks or backslashes).
func validProduced(name string) bool {
	parts := strings.Split(name, "/")
	if len(parts) > MaxOutputDirs+1 {
		return false
	}
	for _, p := range parts {
		if !producedPartRe.MatchString(p) {
			return false
		}
	}
	return true
}

// CheckOutputs checks the outputs a worker reports against the job's declared
// output_files: every file stands for a declared name, none comes twice, there are
// at most max of them (0: no cap), no name is over MaxOutputNameBytes or leaves
// outputs/ (one directory level at most, no "..") and no size is negative. A
// worker's report is written where the user's ffmpeg could write too, so it is
// checked, not trusted. The error quotes at most a clipped name.
func CheckOutputs(outs []Output, declared []string, max int) error {
	if max > 0 && len(outs) > max {
		return fmt.Errorf("the worker reported %d output files, more than the limit of %d", len(outs), max)
	}
	res := make([]*regexp.Regexp, len(declared))
	for i, d := range declared {
		res[i] = OutputPattern(d)
	}
	seen := make(map[string]bool, len(outs))
	for _, o := range outs {
		if len(o.Name) > MaxOutputNameBytes {
			return fmt.Errorf("the worker reported an output name of %d bytes %q, longer than %d; nothing was published", len(o.Name), Clip(o.Name, 80), MaxOutputNameBytes)
		}
		ok := validProduced(o.Name) && o.Size >= 0 && !seen[o.Name]
		if ok {
			ok = false
			for _, re := range res {
				if re.MatchString(o.Name) {
					ok = true
					break
				}
			}
		}
		if !ok {
			return fmt.Errorf("the worker reported an output %q that output_files does not declare (or twice); nothing was published", o.Name)
		}
		seen[o.Name] = true
	}
	return nil
}

// IsPlaylist reports whether an output is a playlist or manifest whose references
// to other outputs are rewritten to their signed links when it is downloaded (HLS
// .m3u8/.m3u, DASH .mpd). See RewritePlaylist.
func IsPlaylist(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".m3u8", ".m3u", ".mpd":
		return true
	}
	return false
}
