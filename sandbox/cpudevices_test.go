package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mediajobs/mediajobs/testenv"
)

// TestCPUDevicesOpen: a job's /dev/null takes writes, /dev/urandom gives
// bytes (ffmpeg's av_get_random_seed, e.g. HLS encryption keys) and /dev/zero
// zeros. The host's own nodes; nothing here changes them.
func TestCPUDevicesOpen(t *testing.T) {
	testenv.Binary(t, "bwrap")
	base := t.TempDir()
	copiesIn(t, base)
	script := `echo hi > /dev/null && echo "null: wrote"
echo "urandom: $(head -c 16 /dev/urandom | wc -c) bytes"
echo "zero: $(head -c 16 /dev/zero | od -An -tx1 | tr -d ' \n')"`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := (&Bwrap{}).Command(ctx, t.TempDir(), "bash", []string{"-c", script}, Env())
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxed shell: %v\n%s", err, out)
	}
	for _, want := range []string{"null: wrote\n", "urandom: 16 bytes\n", "zero: " + strings.Repeat("00", 16) + "\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	cancel()
	waitGone(t, base)
}

// BenchmarkHostLayout is what HostLayout costs a command: with copies of the
// CPU devices, one directory and three mknods (and their removal).
func BenchmarkHostLayout(b *testing.B) {
	copiesIn(b, b.TempDir())
	for i := 0; i < b.N; i++ {
		l := HostLayout(false, "/usr/bin/true")
		if err := l.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSandboxedTrue is a whole sandboxed command: bwrap running true.
func BenchmarkSandboxedTrue(b *testing.B) {
	testenv.Binary(b, "bwrap")
	copiesIn(b, b.TempDir())
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cmd, err := (&Bwrap{}).Command(ctx, dir, "true", nil, Env())
		if err != nil {
			b.Fatal(err)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		cancel()
	}
}

// fakeCPU makes char devices null (1:3), zero (1:5) and urandom (1:9), mode
// 0666, in a temporary directory and points the sandbox's devices there: the
// real path with only the source of the nodes changed, so that no test
// chmods the host's own.
func fakeCPU(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making device nodes needs root")
	}
	src := t.TempDir()
	var paths []string
	for _, n := range []struct {
		name  string
		minor int
	}{{"null", 3}, {"zero", 5}, {"urandom", 9}} {
		p := filepath.Join(src, n.name)
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|n.minor); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // past the umask
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	old := devices
	devices = paths
	t.Cleanup(func() { devices = old })
	return src
}

type node struct {
	mode     os.FileMode
	uid, gid uint32
	rdev     uint64
}

func nodesOf(t *testing.T, src string) map[string]node {
	m := map[string]node{}
	for _, n := range []string{"null", "zero", "urandom"} {
		var x node
		x.mode, x.uid, x.gid, x.rdev = nodeOf(t, filepath.Join(src, n))
		m[n] = x
	}
	return m
}

// useAndChmod uses the devices, then chmods and chowns them.
const useAndChmod = `echo "dev: $(ls /dev | tr '\n' ' ')"
echo hi > /dev/null && echo "null: wrote"
echo "urandom: $(head -c 16 /dev/urandom | wc -c) bytes"
echo "zero: $(head -c 4 /dev/zero | od -An -tx1 | tr -d ' \n')"
chmod 000 /dev/null 2>&1 && echo "chmod null"
chmod 4777 /dev/zero 2>&1 && echo "chmod zero"
chown 65534:65534 /dev/urandom 2>&1 && echo "chown urandom"
stat -c 'after: %n %a' /dev/null`

// runIn runs script in a sandbox; the devices' copies are made in base and
// gone once the command's context has ended.
func runIn(t *testing.T, base, script string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := (&Bwrap{}).Command(ctx, t.TempDir(), "bash", []string{"-c", script}, Env())
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxed shell: %v\n%s", err, out)
	}
	cancel()
	waitGone(t, base)
	return string(out)
}

func wantIn(t *testing.T, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("want %q in:\n%s", w, s)
		}
	}
}

func sameNodes(t *testing.T, src string, was map[string]node, said string) {
	t.Helper()
	for n, x := range nodesOf(t, src) {
		if x != was[n] {
			t.Errorf("the host's %s is now %+v, was %+v (the sandbox said:\n%s)", n, x, was[n], said)
		}
	}
}

// TestCPUDevicesChmodReachesNoHostNode: the runner (root) owns the host's
// nodes, so the sandbox gets copies, writable: they open, and a chmod or
// chown inside changes the copy, not the host's node.
func TestCPUDevicesChmodReachesNoHostNode(t *testing.T) {
	testenv.Binary(t, "bwrap")
	src := fakeCPU(t)
	was := nodesOf(t, src)
	base := t.TempDir()
	copiesIn(t, base)
	l := HostLayout(false)
	if len(l.Devices) != 3 || l.DevicesErr() != nil {
		t.Fatalf("devices %+v: %v", l.Devices, l.DevicesErr())
	}
	for _, d := range l.Devices {
		if filepath.Dir(filepath.Dir(d.Host)) != base || d.ReadOnly || d.Path != "/dev/"+filepath.Base(d.Host) {
			t.Errorf("want a writable copy in %s: %+v", base, d)
		}
	}
	l.Release()
	s := runIn(t, base, useAndChmod)
	// The chmod reached something: the sandbox's own copy.
	wantIn(t, s, "dev: null urandom zero \n", "null: wrote\n", "urandom: 16 bytes\n", "zero: 00000000\n", "chmod null\n", "chmod zero\n", "chown urandom\n", "after: /dev/null 0\n")
	sameNodes(t, src, was, s)
}

// TestCPUDevicesNotTheRunnersAreBoundAsTheyAre: a node the runner does not own
// (an unprivileged runner's) is bound itself, writable: it opens, and the
// sandbox's user cannot chmod it.
func TestCPUDevicesNotTheRunnersAreBoundAsTheyAre(t *testing.T) {
	testenv.Binary(t, "bwrap")
	src := fakeCPU(t)
	host := filepath.Join(src, "null")
	if err := os.Chown(host, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	was := nodesOf(t, src)
	base := t.TempDir()
	copiesIn(t, base)
	l := HostLayout(false)
	l.Release()
	if len(l.Devices) != 3 || l.Devices[0] != (Device{Host: host, Path: "/dev/null"}) || filepath.Dir(filepath.Dir(l.Devices[1].Host)) != base {
		t.Fatalf("devices %+v", l.Devices)
	}
	s := runIn(t, base, useAndChmod)
	wantIn(t, s, "null: wrote\n", "urandom: 16 bytes\n", "zero: 00000000\n", "after: /dev/null 666\n")
	if strings.Contains(s, "chmod null") {
		t.Errorf("the sandbox chmodded a node of the host's:\n%s", s)
	}
	sameNodes(t, src, was, s)
}

// TestCPUDevicesFallBackToReadOnly: with nowhere to make the copies (only a
// nodev mount) or mknod refused, the host's nodes are bound read-only: they do
// not open, no chmod reaches them, the command still runs, and the log says
// why once.
func TestCPUDevicesFallBackToReadOnly(t *testing.T) {
	testenv.Binary(t, "bwrap")
	src := fakeCPU(t)
	was := nodesOf(t, src)
	nodev := t.TempDir()
	if err := syscall.Mount("tmpfs", nodev, "tmpfs", syscall.MS_NODEV, "size=64k,mode=0700"); err != nil {
		t.Skipf("mount a nodev tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(nodev, 0) })
	var logged []string
	oldWarn := warn
	warn = func(m string) { logged = append(logged, m) }
	warned.Store(false)
	t.Cleanup(func() { warn = oldWarn })

	refused := func(t *testing.T, s string) {
		t.Helper()
		wantIn(t, s, "dev: null urandom zero \n", "/dev/null: Permission denied", "urandom: 0 bytes\n", "after: /dev/null 666\n")
		for _, bad := range []string{"null: wrote", "chmod null", "chmod zero", "chown urandom"} {
			if strings.Contains(s, bad) {
				t.Errorf("the sandbox let through %q:\n%s", bad, s)
			}
		}
		sameNodes(t, src, was, s)
	}

	copiesIn(t, nodev)
	l := HostLayout(false)
	if err := l.DevicesErr(); err == nil || !strings.Contains(err.Error(), "nodev") {
		t.Fatalf("DevicesErr: %v", err)
	}
	for _, d := range l.Devices {
		if !d.ReadOnly || filepath.Dir(d.Host) != src {
			t.Errorf("want the host's node, read-only: %+v", d)
		}
	}
	refused(t, runIn(t, nodev, useAndChmod))
	if len(logged) != 1 || !strings.Contains(logged[0], "/dev/null, /dev/zero and /dev/urandom are bound read-only") || !strings.Contains(logged[0], "nodev") {
		t.Errorf("logged %q", logged)
	}

	ok := t.TempDir()
	copiesIn(t, ok)
	oldMknod := mknod
	mknod = func(string, uint32, int) error { return syscall.EPERM }
	t.Cleanup(func() { mknod = oldMknod })
	if l := HostLayout(false); l.DevicesErr() == nil || !strings.Contains(l.DevicesErr().Error(), "operation not permitted") {
		t.Errorf("DevicesErr with mknod refused: %v", l.DevicesErr())
	} else {
		l.Release()
	}
	refused(t, runIn(t, ok, useAndChmod))
	if len(logged) != 1 {
		t.Errorf("logged more than once: %q", logged)
	}
	// A GPU job is refused, not run without its GPUs.
	fakeGPU(t)
	if _, err := (&Bwrap{GPU: true}).Command(context.Background(), t.TempDir(), "bash", nil, Env()); err == nil || !strings.Contains(err.Error(), "no GPU device nodes for the sandbox: could not make the sandbox's copy of") {
		t.Errorf("a GPU sandbox with mknod refused: %v", err)
	}
	waitGone(t, ok)
}
