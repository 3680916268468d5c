package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/testenv"
)

func TestArgs(t *testing.T) {
	l := Layout{Binds: []string{"/usr", "/etc/ld.so.cache"}, Symlinks: map[string]string{"/lib": "usr/lib", "/bin": "usr/bin"}, Devices: []Device{{Host: "/dev/null", Path: "/dev/null", ReadOnly: true}}}
	got := strings.Join(Args(l, "/alloc/x/work", false, []string{"/usr/bin/ffmpeg", "-i", "a"}), " ")
	want := "--unshare-all --unshare-user --uid 65534 --gid 65534 --disable-userns --cap-drop ALL --new-session --die-with-parent --as-pid-1 --hostname mediajobs " +
		"--ro-bind /usr /usr --ro-bind /etc/ld.so.cache /etc/ld.so.cache --symlink usr/bin /bin --symlink usr/lib /lib --dev-bind /dev/null /dev/null --remount-ro /dev/null " +
		"--bind /alloc/x/work /job --remount-ro / --chdir /job -- /usr/bin/ffmpeg -i a"
	if got != want {
		t.Fatalf("Args:\n got %s\nwant %s", got, want)
	}
	if g := strings.Join(Args(l, "/w", true, []string{"x"}), " "); !strings.Contains(g, "--proc /proc --bind /w /job --remount-ro /") {
		t.Fatalf("a GPU sandbox has a private /proc for the CUDA driver: %s", g)
	}
	if g := strings.Join(ReadOnlyArgs(l, "/w", false, []string{"ffprobe"}), " "); !strings.Contains(g, " --ro-bind /w /job --remount-ro / ") {
		t.Fatalf("ffprobe's sandbox binds the job read-only: %s", g)
	}
}

func TestHostLayoutBindsOnlyWhatFFmpegNeeds(t *testing.T) {
	copiesIn(t, t.TempDir())
	l := HostLayout(false, "/usr/bin/ffmpeg", "/opt/ff/ffprobe")
	defer l.Release()
	for _, b := range l.Binds {
		switch {
		case b == "/usr" || b == "/etc/ld.so.cache" || b == "/etc/alternatives" || b == "/etc/fonts" || b == "/opt/ff/ffprobe":
		case contains(topLinks, b): // a directory on hosts without merged /usr
		default:
			t.Errorf("the sandbox shows %s of the host", b)
		}
	}
	if !contains(l.Binds, "/opt/ff/ffprobe") || contains(l.Binds, "/usr/bin/ffmpeg") {
		t.Errorf("binaries outside /usr are bound, the others covered by /usr: %v", l.Binds)
	}
	var devs []string
	for _, d := range l.Devices {
		devs = append(devs, d.Path)
	}
	sort.Strings(devs)
	if !reflect.DeepEqual(devs, []string{"/dev/null", "/dev/urandom", "/dev/zero"}) {
		t.Errorf("devices of a CPU job: %v", devs)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestWhatASandboxedCommandSees runs a shell in the real sandbox (the shell stands
// in for any code an ffmpeg bug could run) and checks what it can see and do.
func TestWhatASandboxedCommandSees(t *testing.T) {
	testenv.Binary(t, "bwrap")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("job input"), 0o640)
	t.Setenv("MEDIAJOBS_SANDBOX_CANARY", "runner secret")
	script := `echo "uid=$(id -u) gid=$(id -g) cwd=$(pwd)"
echo "root: $(ls / | tr '\n' ' ')"
echo "dev: $(ls /dev | tr '\n' ' ')"
for p in /etc/passwd /etc/hostname /tmp /home /root /var /proc/self /sys/class /run ` + dir + `; do test -e "$p" && echo "visible: $p"; done
cat in.txt > out.txt && echo wrote
touch /usr/x 2>>err.log && echo "wrote /usr"
mkdir /tmp 2>>err.log && echo "wrote /"
(echo x > /dev/tcp/127.0.0.1/` + strconv.Itoa(port) + `) 2>>err.log && echo connected
env | sort | tr '\n' ' '`
	base := t.TempDir()
	copiesIn(t, base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := (&Bwrap{}).Command(ctx, dir, "bash", []string{"-c", script}, Env())
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxed shell: %v\n%s", err, out)
	}
	cancel() // the command's context ends: its device copies go
	waitGone(t, base)
	s := string(out)
	for _, want := range []string{"uid=65534 gid=65534 cwd=/job", "wrote", "dev: null urandom zero \n"} {
		if !strings.Contains(s, want) {
			t.Errorf("want %q in:\n%s", want, s)
		}
	}
	for _, bad := range []string{"visible:", "wrote /usr", "wrote /", "connected", "runner secret", "NOMAD"} {
		if strings.Contains(s, bad) {
			t.Errorf("the sandbox let through %q:\n%s", bad, s)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if root, ok := strings.CutPrefix(line, "root: "); ok {
			for _, e := range strings.Fields(root) {
				if !contains([]string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "job"}, e) {
					t.Errorf("the sandbox's / holds %s", e)
				}
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "job input" {
		t.Errorf("the job's directory is not the sandbox's writable /job: %q", b)
	}
	select {
	case <-accepted:
		t.Error("the host's loopback listener got a connection from the sandbox")
	default:
	}
}

func TestMissingBwrapSaysWhatToDo(t *testing.T) {
	_, err := (&Bwrap{Path: "/nonexistent/bwrap"}).Command(context.Background(), t.TempDir(), "ffmpeg", nil, Env())
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "apt-get install bubblewrap") || !strings.Contains(err.Error(), `sandbox = "none"`) {
		t.Fatalf("err %v", err)
	}
}

func TestSetupError(t *testing.T) {
	if got := SetupError("bwrap: Creating new namespace failed: Operation not permitted\nmore"); got != "bwrap: Creating new namespace failed: Operation not permitted" {
		t.Fatalf("SetupError = %q", got)
	}
	if SetupError("[hls] bwrap: not ours") != "" {
		t.Fatal("only bwrap's own first line counts")
	}
}
