package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// fakeGPU makes char devices 1:3 (what /dev/null is) named nvidia0 and
// nvidiactl, mode 0600, in a temporary directory, and points the sandbox's GPU
// device glob there: the real path with only the source of the nodes changed.
func fakeGPU(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making device nodes needs root")
	}
	src := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidiactl"} {
		p := filepath.Join(src, n)
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
		if err := os.Chmod(p, 0o600); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	old := gpuDevices
	gpuDevices = filepath.Join(src, "nvidia*")
	t.Cleanup(func() { gpuDevices = old })
	return src
}

// copiesIn points the copies at the given bases for the test.
func copiesIn(t testing.TB, bases ...string) {
	old := copyBases
	copyBases = func() []string { return bases }
	t.Cleanup(func() { copyBases = old })
}

// copyDirs are the copies' directories in base.
func copyDirs(t *testing.T, base string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(base, copyPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitGone waits until base holds no copies' directory.
func waitGone(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(copyDirs(t, base)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's device copies are left in %s: %v", base, copyDirs(t, base))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func nodeOf(t *testing.T, p string) (os.FileMode, uint32, uint32, uint64) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fi.Mode(), st.Uid, st.Gid, st.Rdev
}

// TestGPUDevicesChmodReachesNoHostNode: the sandbox's user is the runner's on
// the host (root), so it owns every root-owned node it is shown; a chmod or
// chown of /dev/nvidia* inside must change nothing of the host's nodes, and the
// nodes must still open for reading and writing.
func TestGPUDevicesChmodReachesNoHostNode(t *testing.T) {
	testenv.Binary(t, "bwrap")
	src := fakeGPU(t)
	base := t.TempDir()
	copiesIn(t, base)
	host := filepath.Join(src, "nvidia0")
	mode, uid, gid, rdev := nodeOf(t, host)
	script := `stat -c 'inside: %n %F %a %t:%T' /dev/nvidia0
chmod 666 /dev/nvidia0 /dev/nvidiactl 2>&1; chown 65534 /dev/nvidia0 2>&1; chmod 000 /dev/nvidiactl 2>&1
echo "dev: $(ls /dev | tr '\n' ' ')"
echo x > /dev/nvidia0 && echo "wrote nvidia0"
echo "read nvidia0: $(head -c 8 /dev/nvidia0 | wc -c) bytes"`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := (&Bwrap{GPU: true}).Command(ctx, t.TempDir(), "bash", []string{"-c", script}, Env())
	if err != nil {
		t.Fatal(err)
	}
	if d := copyDirs(t, base); len(d) != 1 {
		t.Fatalf("want one directory of copies for the sandbox in %s, have %v", base, d)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxed shell: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{"inside: /dev/nvidia0 character special file 600 1:3\n", "dev: null nvidia0 nvidiactl urandom zero \n", "wrote nvidia0", "read nvidia0: 0 bytes"} {
		if !strings.Contains(s, want) {
			t.Errorf("want %q in:\n%s", want, s)
		}
	}
	for _, n := range []string{"nvidia0", "nvidiactl"} {
		m, u, g, r := nodeOf(t, filepath.Join(src, n))
		if m != mode || u != uid || g != gid || r != rdev {
			t.Errorf("the host's %s is now %v %d:%d dev %#x, was %v %d:%d dev %#x (the sandbox said:\n%s)", n, m, u, g, r, mode, uid, gid, rdev, s)
		}
	}
	cancel() // the command's context ends: its copies go
	waitGone(t, base)
}

// TestGPUDeviceCopiesSkipANodevMount: the copies are made where device nodes
// work (a copy on a nodev mount does not open), and with no such place the
// command is refused, not run without its GPUs or with the host's nodes.
func TestGPUDeviceCopiesSkipANodevMount(t *testing.T) {
	bwrap := testenv.Binary(t, "bwrap")
	fakeGPU(t)
	nodev := t.TempDir()
	if err := syscall.Mount("tmpfs", nodev, "tmpfs", syscall.MS_NODEV, "size=64k,mode=0700"); err != nil {
		t.Skipf("mount a nodev tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(nodev, 0) })
	ok := t.TempDir()
	copiesIn(t, nodev, ok)
	l := HostLayout(true)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	if len(l.GPU) != 2 || filepath.Dir(filepath.Dir(l.GPU[0].Host)) != ok || l.GPU[0].Path != "/dev/nvidia0" || l.GPU[1].Path != "/dev/nvidiactl" {
		t.Fatalf("want the copies in %s, not on the nodev %s: %+v", ok, nodev, l.GPU)
	}
	if err := l.Release(); err != nil || len(copyDirs(t, ok)) != 0 {
		t.Fatalf("Release: %v, left %v", err, copyDirs(t, ok))
	}

	// Why: the same copy on the nodev mount does not open in the sandbox.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(nodev, "nvidia0")
	if err := syscall.Mknod(bad, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	l = HostLayout(false, bash)
	l.GPU = []Device{{Host: bad, Path: "/dev/nvidia0"}}
	out, err := exec.Command(bwrap, Args(l, t.TempDir(), true, []string{bash, "-c", "echo x > /dev/nvidia0"})...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("a device node on a nodev mount opened in the sandbox (%v): %s", err, out)
	}

	copiesIn(t, nodev)
	if _, err := (&Bwrap{GPU: true}).Command(context.Background(), t.TempDir(), "bash", nil, Env()); err == nil || !strings.Contains(err.Error(), "nodev") {
		t.Fatalf("with nowhere to make the copies: %v", err)
	}
}

// TestGPUDevicesNotTheRunnersAreBoundAsTheyAre: a node the runner does not own
// is bound itself (no copy): the sandbox's user cannot chmod it either.
func TestGPUDevicesNotTheRunnersAreBoundAsTheyAre(t *testing.T) {
	testenv.Binary(t, "bwrap")
	src := fakeGPU(t)
	host := filepath.Join(src, "nvidia0")
	if err := os.Chown(host, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	copiesIn(t, base)
	l := HostLayout(true)
	defer l.Release()
	if len(l.GPU) != 2 || l.GPU[0] != (Device{Host: host, Path: "/dev/nvidia0"}) || filepath.Dir(filepath.Dir(l.GPU[1].Host)) != base {
		t.Fatalf("GPU nodes %+v", l.GPU)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := (&Bwrap{GPU: true}).Command(ctx, t.TempDir(), "bash", []string{"-c", "chmod 666 /dev/nvidia0 || echo refused"}, Env())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := cmd.CombinedOutput()
	if m, u, _, _ := nodeOf(t, host); m.Perm() != 0o600 || u != 1000 || !strings.Contains(string(out), "refused") {
		t.Fatalf("the host's node is %v, owner %d; the sandbox said %s", m, u, out)
	}
}

func TestArgsBindDeviceCopiesWritable(t *testing.T) {
	l := Layout{Devices: []Device{{Host: "/tmp/mediajobs-dev-1/null", Path: "/dev/null"}, {Host: "/dev/zero", Path: "/dev/zero", ReadOnly: true}},
		GPU: []Device{{Host: "/tmp/mediajobs-dev-1/nvidia0", Path: "/dev/nvidia0"}}}
	got := strings.Join(Args(l, "/w", true, []string{"x"}), " ")
	if !strings.Contains(got, " --dev-bind /tmp/mediajobs-dev-1/null /dev/null --dev-bind /dev/zero /dev/zero --remount-ro /dev/zero --dev-bind /tmp/mediajobs-dev-1/nvidia0 /dev/nvidia0 --proc /proc ") {
		t.Fatalf("Args: %s", got)
	}
}
