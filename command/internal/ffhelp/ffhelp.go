// Package ffhelp reads ffmpeg's own help output (-h full, -filters, -devices)
// into tables of names. The generator of command/options_gen.go uses it at build
// time, and the command checker at run time on a worker, to learn the options of
// the ffmpeg that worker runs.
package ffhelp

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

// Kind says how ffmpeg reads an option, as far as -h full tells.
type Kind int

const (
	Main     Kind = iota // a main option of ffmpeg's own table (arity asked of ffmpeg separately)
	AV                   // an AVOption of a codec, format, protocol, scaler or bsf: takes a value
	FilterAV             // a filter's AVOption: takes a value (ffmpeg refuses it on the command line)
)

// Help is what -h full says.
type Help struct {
	Kinds map[string]Kind // every option name, without "-"
	Dicts map[string]bool // AVOptions of type dictionary: nested key=value options
	Mains []string        // main options, in help order
	Exits map[string]bool // main options that print information and exit
	// MainArg tells, for each main option, whether -h full shows an argument name
	// after it. Not reliable for every option (see genoptions): a hint.
	MainArg map[string]bool
}

var (
	mainRe   = regexp.MustCompile(`^-(\S+)(?:\s(\S+))?`)
	avoptRe  = regexp.MustCompile(`^  -(\S+)\s+<([a-z0-9_]+)>`)
	filtOpRe = regexp.MustCompile(`^   ([^\s-]\S*)\s+<([a-z0-9_]+)>`)
)

// ParseHelp reads the output of ffmpeg -hide_banner -h full.
func ParseHelp(out string) (*Help, error) {
	h := &Help{Kinds: map[string]Kind{}, Dicts: map[string]bool{}, Exits: map[string]bool{}, MainArg: map[string]bool{}}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case line[0] != ' ' && line[0] != '-':
			section = line
		case line[0] == '-':
			if strings.HasSuffix(section, "AVOptions:") {
				return nil, fmt.Errorf("main option after the AVOptions: %q", line)
			}
			m := mainRe.FindStringSubmatch(line)
			name := m[1]
			if _, dup := h.Kinds[name]; !dup {
				h.Mains = append(h.Mains, name)
				h.Kinds[name] = Main
				// "-name arg   description": one blank before an argument name,
				// two or more before the description.
				h.MainArg[name] = m[2] != ""
			}
			if strings.HasPrefix(section, "Print help") {
				h.Exits[name] = true
			}
		default:
			if m := avoptRe.FindStringSubmatch(line); m != nil {
				if _, ok := h.Kinds[m[1]]; !ok {
					h.Kinds[m[1]] = AV
				}
				if m[2] == "dictionary" {
					h.Dicts[m[1]] = true
				}
			} else if m := filtOpRe.FindStringSubmatch(line); m != nil {
				if _, ok := h.Kinds[m[1]]; !ok {
					h.Kinds[m[1]] = FilterAV
				}
			}
		}
	}
	if len(h.Mains) < 100 || len(h.Kinds) < 1000 {
		return nil, fmt.Errorf("only %d main options, %d in all: is ffmpeg's -h full output as expected?", len(h.Mains), len(h.Kinds))
	}
	return h, nil
}

// ParseFilters reads the output of ffmpeg -hide_banner -filters: the filter names.
func ParseFilters(out string) (map[string]bool, error) {
	filters := map[string]bool{}
	inList := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if !inList {
			inList = strings.Contains(l, "= Source or sink filter")
			continue
		}
		if len(f) >= 2 {
			filters[f[1]] = true
		}
	}
	if len(filters) < 100 {
		return nil, fmt.Errorf("%d filters: is ffmpeg's -filters output as expected?", len(filters))
	}
	return filters, nil
}

// ParseDevices reads the output of ffmpeg -hide_banner -devices: the device
// format names.
func ParseDevices(out string) map[string]bool {
	devices := map[string]bool{}
	inList := false
	for _, l := range strings.Split(out, "\n") {
		if !inList {
			inList = strings.TrimSpace(l) == "--"
			continue
		}
		if len(l) < 5 || len(strings.Fields(l[4:])) == 0 {
			continue
		}
		for _, n := range strings.Split(strings.Fields(l[4:])[0], ",") {
			devices[n] = true
		}
	}
	return devices
}

// Run runs ffmpeg with args in dir, stdin empty, without the environment
// variables that change its logging, and returns what it printed.
func Run(dir, ffmpeg string, args ...string) (string, error) {
	cmd := exec.Command(ffmpeg, args...)
	cmd.Dir = dir
	cmd.Stdin = nil // /dev/null
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "FFREPORT=") && !strings.HasPrefix(e, "AV_LOG_FORCE_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "AV_LOG_FORCE_NOCOLOR=1")
	b, err := cmd.CombinedOutput()
	return string(b), err
}
