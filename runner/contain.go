package runner

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/mediajobs/mediajobs/sandbox"
)

// capProcesses puts the job's sandboxed commands in a pids cgroup of their own
// (docs/containment.md): a job cannot exhaust the node's processes. The
// returned func removes it. Without the sandbox (docker pools: the container
// has pids_limit) it does nothing.
func (r *Runner) capProcesses() (func(), error) {
	if r.Sandbox == nil {
		return func() {}, nil
	}
	max := r.MaxProcs
	if max <= 0 {
		max = sandbox.MaxProcs
	}
	p, err := sandbox.NewPids(max)
	if err != nil {
		return nil, fmt.Errorf("the worker could not cap the job's processes (a pids cgroup below the runner's own; the Nomad client must run as root with cgroups mounted read-write): %v", err)
	}
	r.Sandbox.Pids = p
	return func() {
		r.Sandbox.Pids = nil
		if n := p.Refused(); n > 0 { // ffmpeg runs on with fewer threads
			fmt.Fprintf(r.Log, "the job reached its cap of %d processes and threads: %d refused\n", max, n)
		}
		if err := p.Close(); err != nil {
			fmt.Fprintf(r.Log, "%v\n", err)
		}
	}, nil
}

// readOnlyCommand is command with the job's directory read-only in the sandbox:
// ffprobe writes nothing, so it needs neither a writable job nor the disk watch.
func (r *Runner) readOnlyCommand(ctx context.Context, bin string, args ...string) (*exec.Cmd, error) {
	if r.Sandbox != nil {
		cmd, err := r.Sandbox.ReadOnlyCommand(ctx, r.WorkDir, bin, args, sandbox.Env(gpuEnv()...))
		if err == nil {
			cmd.Stdin = noInput()
		}
		return cmd, err
	}
	return r.command(ctx, bin, args...)
}

// released removes the device node copies cmd's sandbox held (sandbox.Release),
// once cmd has exited: a command's context may last the whole job.
func released(cmd *exec.Cmd) { sandbox.Release(cmd) }

// specialBits are the mode bits no file of a job keeps.
const specialBits = fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// sweep runs after each command, from the host side: on raw_exec the sandbox's
// user is the runner's (root), so a compromised ffmpeg could leave a setuid-root
// file or a FIFO in the job's directory, which stays on the node. It strips the
// setuid, setgid and sticky bits of everything there and removes what is neither
// a regular file, a directory nor a link (the runner makes no other kind).
// Nothing runs in the job meanwhile; the walk follows no link.
func sweep(work string) error {
	root, err := os.OpenRoot(work)
	if err != nil {
		return fmt.Errorf("check the job's files: %w", err)
	}
	defer root.Close()
	var failed error
	fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			failed = err
			return nil
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
		case t&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice|fs.ModeIrregular) != 0:
			if err := root.Remove(p); err != nil {
				failed = err
			}
		default:
			info, err := d.Info()
			if err == nil && info.Mode()&specialBits != 0 {
				err = root.Chmod(p, info.Mode().Perm())
			}
			if err != nil {
				failed = err
			}
		}
		return nil
	})
	if failed != nil {
		return fmt.Errorf("the worker could not clear special files and mode bits from the job's directory: %v", failed)
	}
	return nil
}

// isOwnFile tells whether raw is one of the service's own files (a temporary
// file's download_url), fetched without the SSRF guard so that a gateway on a
// loopback or private address keeps them reachable. It is pinned: exactly the
// scheme, host and port of files (serviceFiles), no user info, and a path under
// its /files/ that stays there once cleaned. Anything else is a user URL.
func isOwnFile(files, raw string) bool {
	if files == "" {
		return false
	}
	base, err := url.Parse(files)
	if err != nil {
		return false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.User != nil || u.Scheme != base.Scheme || hostPort(u) != hostPort(base) {
		return false
	}
	p := u.Path
	if strings.HasSuffix(p, "/") || path.Clean(p) != p || !strings.HasPrefix(p, base.Path) || !strings.HasPrefix(u.EscapedPath(), base.EscapedPath()) {
		return false
	}
	return true
}

// hostPort is u's lower-case host and its port, the scheme's default if none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// ownClient fetches the service's own files: no SSRF guard, and no redirect
// followed (the gateway streams them; a redirect would lead the unguarded fetch
// elsewhere): fetch gets the 3xx and fails on it.
func (r *Runner) ownClient() *http.Client {
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if r.HTTP != nil {
		c := *r.HTTP
		c.CheckRedirect = noRedirect
		return &c
	}
	rc := retryablehttp.NewClient()
	rc.HTTPClient.CheckRedirect = noRedirect
	rc.CheckRetry = retryUnlessRefused
	rc.RetryMax = 3
	rc.RetryWaitMin, rc.RetryWaitMax = 500*time.Millisecond, 5*time.Second
	rc.Logger = nil
	c := rc.StandardClient() // redirects stop in both clients
	c.CheckRedirect = noRedirect
	return c
}
