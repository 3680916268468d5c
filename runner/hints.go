package runner

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// concatURLHint explains a failed command that reads a concat list (-f concat
// -i LIST) naming a URL: ffmpeg runs without network (docs/commands.md), so
// such a list cannot work, and ffmpeg's own message ("Connection refused",
// "Protocol not found") does not say why. The hint says what to write instead.
// It reads the list through an os.Root of the job's directory, so a list that
// is a link out of the job is not followed; "" when there is nothing to say.
func concatURLHint(dir string, argv []string) string {
	concat := false
	for i := 0; i+1 < len(argv); i++ {
		switch {
		case argv[i] == "-f":
			concat = argv[i+1] == "concat"
			i++
		case argv[i] == "-i":
			if concat {
				if u := urlInList(dir, argv[i+1]); u != "" {
					return fmt.Sprintf("the concat list %s names %s, a URL: commands run without network access, so put each file in input_files and name it in the list as %s (entries are read relative to the list's own directory)", argv[i+1], u, listEntry(argv[i+1]))
				}
			}
			concat = false
			i++
		}
	}
	return ""
}

// listEntry is how a list at path names an input: a list among the inputs
// names it by its bare name, any other list by inputs/<name> relative to it.
func listEntry(path string) string {
	rel := strings.TrimPrefix(path, "/job/")
	switch d := filepath.Dir(rel); {
	case d == "inputs":
		return "file '<name>'"
	case d == ".":
		return "file 'inputs/<name>'"
	default:
		return "file '/job/inputs/<name>'"
	}
}

// urlInList returns the first entry of the concat list at path (job-relative,
// or under /job as the sandbox sees it) that is a URL, without its query and
// user info (a signed link's secret stays out of the error).
func urlInList(dir, path string) string {
	path = strings.TrimPrefix(path, "/job/")
	root, err := os.OpenRoot(dir)
	if err != nil {
		return ""
	}
	defer root.Close()
	// Not blocking on a FIFO, not following a last link: only a regular file is read.
	f, err := root.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "file")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		entry := strings.Trim(strings.TrimSpace(rest), `'"`)
		u, err := url.Parse(entry)
		if err != nil || u.Scheme == "" || u.Host == "" {
			continue
		}
		u.User, u.RawQuery, u.Fragment = nil, "", ""
		return u.String()
	}
	return ""
}
