package runner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestConcatURLHint(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "inputs"), 0o755)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("inputs/urls.txt", "# a list\nfile 'inputs/a.mp4'\nfile 'https://u:p@example.com/b.mp4?X-Amz-Signature=s3cret'\n")
	write("made.txt", "file https://example.com/c.mp4\n")
	write("inputs/local.txt", "file 'a.mp4'\nfile /job/inputs/b.mp4\n")
	os.Symlink("/etc/hostname", filepath.Join(dir, "inputs", "out.txt"))
	if err := syscall.Mkfifo(filepath.Join(dir, "inputs", "fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"-f", "concat", "-safe", "0", "-i", "inputs/urls.txt", "-c", "copy", "outputs/o.mp4"}, "names https://example.com/b.mp4, a URL"},
		{[]string{"-f", "concat", "-i", "inputs/urls.txt", "outputs/o.mp4"}, "name it in the list as file '<name>'"},
		{[]string{"-f", "concat", "-i", "/job/inputs/urls.txt", "outputs/o.mp4"}, "names https://example.com/b.mp4"},
		{[]string{"-f", "concat", "-i", "inputs/local.txt", "outputs/o.mp4"}, ""},
		{[]string{"-f", "concat", "-i", "made.txt", "outputs/o.mp4"}, "as file 'inputs/<name>'"}, // a list an earlier command wrote
		{[]string{"-i", "inputs/urls.txt", "outputs/o.mp4"}, ""},                                 // not read as a concat list
		{[]string{"-f", "concat", "-i", "inputs/out.txt", "outputs/o.mp4"}, ""},
		{[]string{"-f", "concat", "-i", "inputs/fifo.txt", "outputs/o.mp4"}, ""},                      // a FIFO no one writes: not waited on                       // a link out of the job is not followed
		{[]string{"-f", "mp4", "-i", "x", "-f", "concat", "-i", "inputs/urls.txt", "o.mp4"}, "a URL"}, // the -f that precedes its -i
	} {
		got := concatURLHint(dir, tc.argv)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%v: hint %q, want %q", tc.argv, got, tc.want)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "u:p@") {
			t.Errorf("%v: hint %q shows the URL's secret", tc.argv, got)
		}
	}
}
