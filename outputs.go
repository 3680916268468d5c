package mediajobs

import (
	"fmt"
	"regexp"
	"strings"
)

var counterRe = regexp.MustCompile(`%0?([1-9]?)d`)

// OutputPattern matches the files one output_files entry stands for: the name
// itself, or for a sequence such as seg_%03d.ts every seg_<digits>.ts.
func OutputPattern(name string) *regexp.Regexp {
	loc := counterRe.FindStringIndex(name)
	if loc == nil {
		return regexp.MustCompile("^" + regexp.QuoteMeta(name) + "$")
	}
	return regexp.MustCompile("^" + regexp.QuoteMeta(name[:loc[0]]) + `\d+` + regexp.QuoteMeta(name[loc[1]:]) + "$")
}

// CheckOutputs checks the outputs a worker reports against the job's declared
// output_files: every file stands for a declared name, none comes twice, there are
// at most max of them (0: no cap), no name is over MaxOutputNameBytes, and no size
// is negative. A worker's report is written where the user's ffmpeg could write
// too, so it is checked, not trusted. The error quotes at most a clipped name.
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
		ok := !strings.ContainsAny(o.Name, "/\\") && o.Size >= 0 && !seen[o.Name]
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
