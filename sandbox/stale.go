package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// staleAge: a directory of copies this old serves no sandbox, whoever made it.
// Its copies are needed only until bwrap has bound them, as it starts,
// milliseconds after they were made; then the bind mounts hold them.
const staleAge = 24 * time.Hour

// RemoveStaleCopies removes from the temporary directory the directories of
// device node copies that no sandbox will use: those of a runner that is gone
// (killed before it released them) and any a day old. It is for a runner's
// start, where $TMPDIR is its Nomad task's own. /dev, the fallback base, is
// shared by the node's runners and left alone: it is a tmpfs, emptied at
// reboot (docs/threat-model.md).
func RemoveStaleCopies() (removed []string, err error) {
	base := os.TempDir()
	dirs, err := filepath.Glob(filepath.Join(base, copyPrefix+"*"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || !stale(filepath.Base(d), fi.ModTime()) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, d)
	}
	return removed, errors.Join(errs...)
}

// stale tells whether the copies' directory name, last changed at mod, is
// needed by no one: a day old, or its runner (the pid in its name) is not
// running. A pid that is running, maybe another process's now, keeps it.
func stale(name string, mod time.Time) bool {
	if time.Since(mod) > staleAge {
		return true
	}
	p, _, ok := strings.Cut(strings.TrimPrefix(name, copyPrefix), "-")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
