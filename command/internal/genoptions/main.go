// Command genoptions writes command/options_gen.go: the options, filters and
// device formats of the ffmpeg on PATH, for the command checker's allowlist.
//
// Run it through go generate in command/ (go generate ./command). Names come from
// ffmpeg's own help output (-h full, -filters, -devices). Whether a main option
// takes a value, and whether it is a boolean (-noX), is asked of ffmpeg's own
// command-line parser: the help output prints some options that take a value
// without an argument name (-filter_threads, -apad, -discard) and some that take
// none with one (-hide_banner hide_banner), so it cannot be trusted for arity.
//
// Usage: genoptions [-o file] [-ffmpeg path]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/mediajobs/mediajobs/command/internal/ffhelp"
)

// Option kinds, as named in command/options.go: or'ed flags.
const (
	kindArg    = "optMain | optArg"     // a main option that takes a value: the next word
	kindNoArg  = "optMain"              // a main option that takes no value
	kindExit   = "optMain | optExit"    // prints information and exits; takes an optional value
	kindAVOpt  = "optAV | optArg"       // an AVOption (codec, format, protocol, ...): takes a value
	kindFilter = "optFilterAV | optArg" // a filter's AVOption: takes a value (ffmpeg itself refuses these)
	boolFlag   = " | optBool"           // OPT_BOOL: -noX is accepted too
)

const probe = "@@genoptions-probe@@"

var (
	readRe = regexp.MustCompile(`^Reading option '(.*?)' \.\.\.`)
)

func main() {
	out := flag.String("o", "options_gen.go", "output file")
	ffmpeg := flag.String("ffmpeg", "ffmpeg", "ffmpeg binary")
	flag.Parse()
	src, err := Generate(*ffmpeg)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}

func run(dir, ffmpeg string, args ...string) (string, error) {
	return ffhelp.Run(dir, ffmpeg, args...)
}

// Generate returns the gofmt'ed source of options_gen.go.
func Generate(ffmpeg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "genoptions")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	must := func(args ...string) string {
		s, err := run(dir, ffmpeg, args...)
		if err != nil {
			log.Fatalf("ffmpeg %s: %v\n%s", strings.Join(args, " "), err, s)
		}
		return s
	}
	version := strings.Fields(strings.SplitN(must("-version"), "\n", 2)[0])
	if len(version) < 3 || version[0] != "ffmpeg" {
		return nil, fmt.Errorf("unexpected ffmpeg -version output %q", version)
	}

	help, err := ffhelp.ParseHelp(must("-hide_banner", "-h", "full"))
	if err != nil {
		return nil, err
	}
	opts := map[string]string{} // name -> kind
	for name, k := range help.Kinds {
		switch k {
		case ffhelp.Main:
			opts[name] = ""
		case ffhelp.AV:
			opts[name] = kindAVOpt
		case ffhelp.FilterAV:
			opts[name] = kindFilter
		}
	}
	dicts, mains, exits := help.Dicts, help.Mains, help.Exits

	// Arity: ask ffmpeg's split_commandline, which logs at debug level how it read
	// each word. "-x PROBE": if PROBE is read as the next option (an output url),
	// -x took no value.
	args := []string{"-loglevel", "debug", "-hide_banner"}
	for _, name := range mains {
		args = append(args, "-"+name, probe)
	}
	log1, _ := run(dir, ffmpeg, args...)
	var read []string
	for _, l := range strings.Split(log1, "\n") {
		if m := readRe.FindStringSubmatch(l); m != nil {
			read = append(read, m[1])
		}
	}
	for i := 2; i < len(read); {
		w := read[i]
		if !strings.HasPrefix(w, "-") {
			return nil, fmt.Errorf("probe out of step at %q", w)
		}
		name := w[1:]
		if i+1 < len(read) && read[i+1] == probe {
			opts[name] = kindNoArg
			i += 2
		} else {
			opts[name] = kindArg
			i++
		}
		if exits[name] {
			opts[name] = kindExit
		}
	}
	for _, name := range mains {
		if opts[name] == "" {
			return nil, fmt.Errorf("ffmpeg did not read -%s in the probe", name)
		}
	}
	// Booleans: "-noX" is read as X with argument 0 only when X is OPT_BOOL (a few
	// of those take a value too, e.g. -autorotate); otherwise ffmpeg stops at
	// "Unrecognized option". One run per option, a few at a time.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		sem  = make(chan struct{}, 8)
		isNo = map[string]bool{}
	)
	for _, name := range mains {
		if exits[name] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			s, _ := run(dir, ffmpeg, "-loglevel", "debug", "-hide_banner", "-no"+name)
			for _, l := range strings.Split(s, "\n") {
				if strings.HasPrefix(l, "Reading option '-no"+name+"' ... matched as option '"+name+"' ") && strings.HasSuffix(l, "with argument 0.") {
					mu.Lock()
					isNo[name] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for name := range isNo {
		opts[name] += boolFlag
	}
	// -i is a group separator, not in ffmpeg's option table: it takes the input.
	if _, ok := opts["i"]; ok && opts["i"] != kindFilter {
		return nil, fmt.Errorf("-i is in the help as %s: check the generator", opts["i"])
	}
	opts["i"] = kindArg

	filters, err := ffhelp.ParseFilters(must("-hide_banner", "-filters"))
	if err != nil {
		return nil, err
	}
	devices := ffhelp.ParseDevices(must("-hide_banner", "-devices"))
	if len(devices) == 0 {
		return nil, fmt.Errorf("no devices: is ffmpeg's -devices output as expected?")
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by genoptions from ffmpeg %s; DO NOT EDIT.\n\npackage command\n\n", version[2])
	fmt.Fprintf(&b, "// ffmpegVersion is the ffmpeg the tables below were generated from.\nconst ffmpegVersion = %q\n\n", version[2])
	b.WriteString("// ffmpegOptions holds every option ffmpeg knows (name without \"-\"): main\n// options, and the AVOptions of codecs, formats, protocols, scalers and filters.\nvar ffmpegOptions = map[string]optKind{\n")
	for _, k := range sorted(opts) {
		fmt.Fprintf(&b, "%q: %s,\n", k, opts[k])
	}
	b.WriteString("}\n\n// dictOptions are AVOptions whose value is a key=value list of options for a\n// nested muxer, demuxer or protocol.\nvar dictOptions = map[string]bool{\n")
	for _, k := range sorted(dicts) {
		fmt.Fprintf(&b, "%q: true,\n", k)
	}
	b.WriteString("}\n\n// ffmpegFilters holds every filter name (ffmpeg -filters).\nvar ffmpegFilters = map[string]bool{\n")
	for _, k := range sorted(filters) {
		fmt.Fprintf(&b, "%q: true,\n", k)
	}
	b.WriteString("}\n\n// deviceFormats holds the input and output devices (ffmpeg -devices).\nvar deviceFormats = map[string]bool{\n")
	for _, k := range sorted(devices) {
		fmt.Fprintf(&b, "%q: true,\n", k)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

func sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
