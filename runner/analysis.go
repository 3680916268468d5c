package runner

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/sys/unix"
)

// Analysis filters print their result as a JSON object after a line naming the
// filter instance, which is what a two-pass loudness normalisation reads back:
//
//	[Parsed_loudnorm_0 @ 0x55a019d11a80] [info]
//	{
//		"input_i" : "-21.75",
//		...
//	}
//
// The runner finds such objects in each command's log and reports them in the
// result (mj.Analysis), so the job view carries them.

// contextLine is a log line of a filter instance: its name, and what follows the
// level tag.
var contextLine = regexp.MustCompile(`^\[([A-Za-z0-9_]+) @ 0x[0-9a-f]+\] (?:\[[a-z]+\] )?(.*)$`)

// instanceRe is ffmpeg's name of a filter parsed from a graph: Parsed_<filter>_<n>.
var instanceRe = regexp.MustCompile(`^Parsed_(.+)_\d+$`)

// maxAnalysisBlock bounds one JSON block, in bytes and lines.
const (
	maxAnalysisBlock = 16 << 10
	maxAnalysisLines = 400
)

// parseAnalysis returns the JSON objects in log (a command's log, as the runner
// keeps it) that follow a line of a filter instance, in order.
func parseAnalysis(log []byte, command int) []mj.Analysis {
	var out []mj.Analysis
	lines := strings.Split(string(log), "\n")
	instance := ""
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\r")
		rest := strings.TrimSpace(l)
		if m := contextLine.FindStringSubmatch(l); m != nil {
			instance, rest = m[1], strings.TrimSpace(m[2])
			if rest == "" {
				continue
			}
		} else if strings.HasPrefix(l, "[") {
			instance = "" // another tagged line: what follows is no filter's
		}
		if instance == "" || !strings.HasPrefix(rest, "{") {
			continue
		}
		// Collect lines until they make one JSON value.
		var block bytes.Buffer
		block.WriteString(rest)
		j := i
		for !json.Valid(block.Bytes()) && j+1 < len(lines) && j-i < maxAnalysisLines && block.Len() < maxAnalysisBlock {
			j++
			block.WriteByte('\n')
			block.WriteString(strings.TrimRight(lines[j], "\r"))
		}
		if !json.Valid(block.Bytes()) {
			continue
		}
		var compact bytes.Buffer
		if json.Compact(&compact, block.Bytes()) != nil || compact.Len() == 0 || compact.Bytes()[0] != '{' {
			continue
		}
		filter := instance
		if m := instanceRe.FindStringSubmatch(instance); m != nil {
			filter = m[1]
		}
		out = append(out, mj.Analysis{Command: command, Filter: filter, Instance: instance, Data: compact.Bytes()})
		i = j
		instance = ""
	}
	return out
}

// readAnalysis parses command n's log in the job's directory, read as the
// uploads read it: through an os.Root, never through a link, a regular file no
// larger than a log can be.
func readAnalysis(workDir string, n int) []mj.Analysis {
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return nil
	}
	defer root.Close()
	f, err := root.OpenFile(logPath(n), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > logCap+4096 {
		return nil
	}
	b := make([]byte, fi.Size())
	k, _ := f.ReadAt(b, 0)
	return mj.BoundAnalysis(parseAnalysis(b[:k], n))
}
