package command

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/mediajobs/mediajobs/command/internal/ffhelp"
)

// Options is what one ffmpeg binary knows: its options and filters, read from its
// own help output (-h full, -filters) the first time a command names something
// the service's table (options_gen.go) lacks, then kept for the process. The
// runner sets Spec.Worker to its ffmpeg's, so that a worker with a newer ffmpeg
// than the service's table runs that ffmpeg's options (see docs/threat-model.md:
// the refusal tables are by name, the sandbox is the guarantee for new ones).
type Options struct {
	bin     string
	once    sync.Once
	err     error
	version string
	options map[string]optKind
	filters map[string]bool
}

var workerOptions sync.Map // binary -> *Options

// WorkerOptions returns the Options of the ffmpeg binary (a name on PATH or a
// path), one per binary and process. Nothing runs until a lookup needs it.
func WorkerOptions(ffmpeg string) *Options {
	if ffmpeg == "" {
		ffmpeg = "ffmpeg"
	}
	o, _ := workerOptions.LoadOrStore(ffmpeg, &Options{bin: ffmpeg})
	return o.(*Options)
}

// Version is the version the worker's ffmpeg reports ("" before it is read).
func (o *Options) Version() string { return o.version }

func (o *Options) load() error {
	o.once.Do(func() { o.err = o.read() })
	return o.err
}

var readOptionRe = regexp.MustCompile(`^Reading option '(.*?)' \.\.\.`)

// probeWord is what the arity probe gives each option (see genoptions).
const probeWord = "@@mediajobs-probe@@"

func (o *Options) read() error {
	dir, err := os.MkdirTemp("", "ffmpeg-options")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := func(args ...string) (string, error) {
		out, err := ffhelp.Run(dir, o.bin, args...)
		if err != nil {
			return "", fmt.Errorf("%s %s: %v", o.bin, strings.Join(args, " "), err)
		}
		return out, nil
	}
	v, err := run("-version")
	if err != nil {
		return err
	}
	if f := strings.Fields(strings.SplitN(v, "\n", 2)[0]); len(f) >= 3 && f[0] == "ffmpeg" {
		o.version = f[2]
	} else {
		return fmt.Errorf("%s -version: unexpected output %q", o.bin, strings.SplitN(v, "\n", 2)[0])
	}
	h, err := run("-hide_banner", "-h", "full")
	if err != nil {
		return err
	}
	help, err := ffhelp.ParseHelp(h)
	if err != nil {
		return err
	}
	f, err := run("-hide_banner", "-filters")
	if err != nil {
		return err
	}
	if o.filters, err = ffhelp.ParseFilters(f); err != nil {
		return err
	}
	o.options = make(map[string]optKind, len(help.Kinds))
	var probe []string // main options the service's table lacks: arity asked of ffmpeg
	for name, k := range help.Kinds {
		switch {
		case help.Exits[name]:
			o.options[name] = optMain | optExit
		case k == ffhelp.AV:
			o.options[name] = optAV | optArg
		case k == ffhelp.FilterAV:
			o.options[name] = optFilterAV | optArg
		case ffmpegOptions[name]&optMain != 0:
			o.options[name] = ffmpegOptions[name]
		default:
			o.options[name] = optMain
			if help.MainArg[name] {
				o.options[name] |= optArg
			}
			probe = append(probe, name)
		}
	}
	if len(probe) > 0 {
		// ffmpeg's split_commandline logs at debug level how it read each word:
		// "-x PROBE" read as -x then PROBE means -x took no value.
		args := []string{"-loglevel", "debug", "-hide_banner"}
		for _, name := range probe {
			args = append(args, "-"+name, probeWord)
		}
		out, _ := ffhelp.Run(dir, o.bin, args...)
		var read []string
		for _, l := range strings.Split(out, "\n") {
			if m := readOptionRe.FindStringSubmatch(l); m != nil {
				read = append(read, m[1])
			}
		}
		for i := 2; i < len(read); i++ {
			name, ok := strings.CutPrefix(read[i], "-")
			if !ok || ffmpegOptions[name] != 0 || o.options[name]&optMain == 0 {
				continue
			}
			if i+1 < len(read) && read[i+1] == probeWord {
				o.options[name] &^= optArg
				i++
			} else {
				o.options[name] |= optArg
			}
		}
	}
	return nil
}
